'use strict';
// HTTP: the RateLimit fields of a decision (the values of the server's
// rl_headers, src/http.c), and an Express middleware that answers 429 with
// them and Retry-After, keyed by the client address that the nearest
// trusted proxy saw (the rl_client_ip rules: a header is believed only as
// far as trusted proxies wrote it).

const gcra = require('./gcra');
const { RateLimitUsageError } = require('./errors');
const { clientIp, clientIpForwarded, ipKey, parseTrusted } = require('./client_ip');
const { hasLimit, rateAndBurst } = require('./limit');

// Whole seconds, rounded up, of microseconds (BigInt).
const ceilSeconds = (us) => (us + 999999n) / 1000000n;

function sfString(limiter) {
  if (!/^[\x20-\x7e]+$/.test(limiter)) {
    throw new RateLimitUsageError('limiter must be printable ASCII to name an HTTP rate limit', '22023', limiter);
  }
  return `"${limiter.replace(/["\\]/g, '\\$&')}"`;
}

// The fields of decision d of limiter under (rate, burst), as rl_headers:
// { 'RateLimit-Policy', RateLimit, 'Retry-After' (a retriable denial only) }.
function rateLimitHeaders(d, limiter, rate, burst) {
  const name = sfString(limiter);
  const { limit, error } = gcra.limitInit(rate, burst, BigInt(Date.now()) * 1000n - 946684800000000n,
    gcra.PG_MAX_TIME_US);
  if (error) throw new RateLimitUsageError(gcra.ERRORS[error], '22023', limiter);
  const window = Math.max(1, Math.ceil(burst / rate));
  const fields = { 'RateLimit-Policy': `${name};q=${burst};w=${window}` };
  // seconds until the next cell is back: the debt modulo T, or T
  const resetUs = BigInt(Math.round(d.resetAfter * 1e6));
  let nextCell = 0n;
  let value = `${name};r=${d.remaining}`;
  if (resetUs > 0n) {
    const back = resetUs % limit.intervalUs || limit.intervalUs;
    nextCell = ceilSeconds(back);
    value += `;t=${nextCell}`;
  }
  fields.RateLimit = value;
  if (!d.allowed && Number.isFinite(d.retryAfter)) {
    const retry = ceilSeconds(BigInt(Math.round(d.retryAfter * 1e6)));
    fields['Retry-After'] = String(retry > nextCell ? retry : nextCell);
  }
  return fields;
}

// rateLimit(limiter, options): Express middleware.  options: limiter, rate
// and burst or limit and windowMs, cost (one limit), or limits: an array or
// (req, ip) => array of such requests, each with its key (all or nothing);
// a request without a key is keyed by the client address (rl_ip_key of it,
// IPv6 by ipv6Prefix).  trustedProxies: the proxies whose header is
// believed (none by default); header: 'x-forwarded-for' (default) or
// 'forwarded' (RFC 7239).  The answer, as express-rate-limit's options say
// it: skip(req, res), handler(req, res, next, options) or message (text, an
// object sent as JSON, or (req, res) => either) with statusCode, and
// requestPropertyName.
function rateLimit(limiter, options = {}) {
  const trusted = parseTrusted(options.trustedProxies ?? null);
  const forwarded = (options.header ?? 'x-forwarded-for').toLowerCase() === 'forwarded';
  const ipv6Prefix = options.ipv6Prefix ?? 64;
  const single = options.limits === undefined
    ? [{ limiter: options.limiter, rate: options.rate, burst: options.burst, limit: options.limit,
      windowMs: options.windowMs, cost: options.cost }] : null;
  const limitsOf = typeof options.limits === 'function' ? options.limits : () => single ?? options.limits;
  const used = {
    ...options, statusCode: options.statusCode ?? 429, message: options.message ?? 'Too many requests\n',
    requestPropertyName: options.requestPropertyName ?? 'rateLimit', handler: options.handler ?? sendDenial,
  };
  if (!Number.isInteger(used.statusCode) || used.statusCode < 100 || used.statusCode > 599) {
    throw new RangeError('statusCode must be an HTTP status code, an integer from 100 to 599');
  }
  if (typeof used.requestPropertyName !== 'string' || used.requestPropertyName === '') {
    throw new TypeError('requestPropertyName must be a non-empty string');
  }
  for (const name of ['handler', 'skip']) {
    if (used[name] !== undefined && typeof used[name] !== 'function') throw new TypeError(`${name} must be a function`);
  }

  return async function rateLimitMiddleware(req, res, next) {
    try {
      if (used.skip && await used.skip(req, res)) return next();
      const header = req.headers[forwarded ? 'forwarded' : 'x-forwarded-for'] ?? null;
      const ip = (forwarded ? clientIpForwarded : clientIp)(req.socket.remoteAddress, header, trusted);
      const ipText = ip === null ? null : ipKey(ip, ipv6Prefix);
      const requests = limitsOf(req, ipText).map((r) => ({ ...r, key: r.key ?? ipText }));
      const d = requests.length === 1 && options.limits === undefined
        ? { ...(await limiter.take(requests[0].limiter, requests[0].key, requests[0])), binding: 0 }
        : await limiter.takeAll(requests);
      req[used.requestPropertyName] = d;
      // an answer already on its way takes no more fields
      if (!res.headersSent) setFields(res, d, requests[d.binding], limiter);
      if (d.allowed) return next();
      return await used.handler(req, res, next, used);
    } catch (err) {
      return next(err);
    }
  };
}

// The RateLimit fields of decision d of request binding, appended after
// those of any limiter before, so that each one reports; Retry-After of a
// denial (it ends the answer: no other limiter follows).
function setFields(res, d, binding, limiter) {
  const limit = hasLimit(binding) ? rateAndBurst(binding, binding.limiter) : limiter.policy(binding.limiter);
  if (limit) {
    const fields = rateLimitHeaders(d, binding.limiter, limit.rate, limit.burst);
    res.append('RateLimit-Policy', fields['RateLimit-Policy']);
    res.append('RateLimit', fields.RateLimit);
    if (fields['Retry-After'] !== undefined) res.set('Retry-After', fields['Retry-After']);
  } else if (!d.allowed && Number.isFinite(d.retryAfter)) res.set('Retry-After', String(Math.ceil(d.retryAfter)));
}

// handler's default: statusCode with message, text as text/plain and
// anything else as JSON; nothing when an answer is already on its way.
async function sendDenial(req, res, next, options) {
  if (res.headersSent) return;
  const body = typeof options.message === 'function' ? await options.message(req, res) : options.message;
  res.status(options.statusCode);
  if (typeof body === 'string') res.type('text/plain').send(body);
  else res.json(body);
}

module.exports = { rateLimit, rateLimitHeaders };
