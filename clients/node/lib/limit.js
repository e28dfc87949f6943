'use strict';
// A limit as an application says it: { rate, burst } (requests per second,
// the bucket's size: rl_take's arguments) or { limit, windowMs } (limit
// requests per window, the window in ms or a duration such as '1 m' or
// '15 minutes').  Both are the same GCRA limit: burst = limit and
// rate = limit per window.

const { RateLimitUsageError } = require('./errors');

const INT32_MAX = 2147483647;
const UNIT_MS = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };
const UNITS = {
  ms: 'ms', msec: 'ms', millisecond: 'ms', milliseconds: 'ms',
  s: 's', sec: 's', secs: 's', second: 's', seconds: 's',
  m: 'm', min: 'm', mins: 'm', minute: 'm', minutes: 'm',
  h: 'h', hr: 'h', hrs: 'h', hour: 'h', hours: 'h',
  d: 'd', day: 'd', days: 'd',
};
const DURATION = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$/i;
const BAD_WINDOW = 'windowMs must be a number of milliseconds above 0 or a duration such as "1 m" or "15 minutes"';

// windowMs in milliseconds: a number, or a duration string.
function durationMs(value, limiter) {
  let ms = NaN;
  if (typeof value === 'number') ms = value;
  else if (typeof value === 'string') {
    const m = DURATION.exec(value);
    const unit = m && UNITS[m[2].toLowerCase()];
    if (unit) ms = Number(m[1]) * UNIT_MS[unit];
  }
  if (!Number.isFinite(ms) || ms <= 0) throw new RateLimitUsageError(BAD_WINDOW, '22023', limiter);
  return ms;
}

// Whether request r names its limit (the explicit form) rather than its policy.
const hasLimit = (r) => r.rate !== undefined || r.burst !== undefined || r.limit !== undefined || r.windowMs !== undefined;

// { rate, burst } of request r in the explicit form; rate and burst are
// checked later, as rl_take checks them.
function rateAndBurst(r, limiter) {
  if (r.limit === undefined && r.windowMs === undefined) return { rate: r.rate, burst: r.burst };
  if (r.rate !== undefined || r.burst !== undefined) {
    throw new RateLimitUsageError('a limit is rate and burst, or limit and windowMs, not both', '22023', limiter);
  }
  if (!Number.isInteger(r.limit) || r.limit < 1 || r.limit > INT32_MAX) {
    throw new RateLimitUsageError('limit must be an integer from 1 to 2147483647 requests per window', '22023', limiter);
  }
  return { rate: (r.limit * 1000) / durationMs(r.windowMs, limiter), burst: r.limit };
}

module.exports = { hasLimit, rateAndBurst, durationMs, INT32_MAX };
