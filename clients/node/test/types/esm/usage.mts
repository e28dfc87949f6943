// An ES module's use, checked by tsc --noEmit with nodenext resolution
// (test/package.test.js): the types reach an import through package.json's
// exports, named and default.
import limits, { RateLimiter, RateLimitUsageError, rateLimit, type Decision } from 'ratelimit-client';

const limiter = new RateLimiter({ connectionString: 'postgres://web@localhost/app' });
const d: Decision = await limiter.take('api', 'k', { limit: 100, windowMs: '15 minutes' });
const middleware = rateLimit(limiter, { limiter: 'api', limit: 100, windowMs: 900_000, message: { error: 'too many' } });
const same: typeof RateLimiter = limits.RateLimiter;
try {
  await limiter.take('', 'k');
} catch (err) {
  if (err instanceof RateLimitUsageError) console.log(err.code, err.cause);
}
// @ts-expect-error: a decision's ms are numbers
const wrong: string = d.retryAfterMs;
console.log(d.resetAfterMs, middleware, same, wrong);
