// ratelimit-client for ES modules: the CommonJS module's exports, named and
// as the default export, so that both forms share one copy of every class.
import client from './index.js';

export const {
  RateLimiter, RateLimitUsageError, RateLimitError, DEFAULTS, clientIp, clientIpForwarded, ipKey, rateLimit, rateLimitHeaders,
} = client;
export default client;
