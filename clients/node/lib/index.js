'use strict';
// ratelimit-client: the ratelimit extension's decisions for Node, on pg.
const { RateLimiter, RateLimitError, DEFAULTS } = require('./client');
const { clientIp, clientIpForwarded, ipKey } = require('./client_ip');
const { rateLimit, rateLimitHeaders } = require('./http');

module.exports = { RateLimiter, RateLimitError, DEFAULTS, clientIp, clientIpForwarded, ipKey, rateLimit, rateLimitHeaders };
