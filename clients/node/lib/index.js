'use strict';
// ratelimit-client: the ratelimit extension's decisions for Node, on pg.
const { RateLimiter, DEFAULTS } = require('./client');
const { RateLimitUsageError } = require('./errors');
const { clientIp, clientIpForwarded, ipKey } = require('./client_ip');
const { rateLimit, rateLimitHeaders } = require('./http');

module.exports = {
  RateLimiter, RateLimitUsageError, DEFAULTS, clientIp, clientIpForwarded, ipKey, rateLimit, rateLimitHeaders,
  // the name of 1.2, deprecated: the same class
  RateLimitError: RateLimitUsageError,
};
