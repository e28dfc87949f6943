// A typed use of every call, checked by tsc --noEmit (test/clients/node.pl);
// the lines marked @ts-expect-error must not type-check.
import { RateLimiter, RateLimitError, RateLimitUsageError, rateLimit, rateLimitHeaders, clientIp, ipKey, Decision, DecisionAll, Policy, Stats } from 'ratelimit-client';

async function use(): Promise<void> {
  const limiter = new RateLimiter({ connectionString: 'postgres://web@localhost/app', deadlineMs: 250, logger: console });
  new RateLimiter({ idleTimeoutMs: 5000, logger: { warn: (fields, message) => console.log(fields.limiter, fields.reason, message) } });
  const d: Decision = await limiter.take('auth_login', 'ada@example.com', { rate: 10 / 900, burst: 10 });
  const p: Decision = await limiter.take('auth_login', 'ada@example.com');
  const w: Decision = await limiter.take('auth_login', 'ada@example.com', { limit: 10, windowMs: '15 minutes' });
  const waitMs: number = w.retryAfterMs + w.resetAfterMs + w.reset + (w.limit ?? 0);
  await limiter.take('auth_login', 'ada@example.com', { limit: 10, windowMs: 900_000 });
  const all: DecisionAll = await limiter.takeAll([{ limiter: 'sign_in_ip', key: '203.0.113.7' }, { limiter: 'sign_in_failures', key: 'ada' }]);
  const index: number = all.binding;
  const refunded: boolean = await limiter.refund('sign_in_failures', 'ada');
  const stats: Stats = limiter.stats();
  const rule: Policy | null = limiter.policy('auth_login');
  const lockoutMs: number = rule?.lockoutMs ?? rule?.lockoutMaxMs ?? rule?.lockoutGrowth ?? 0;
  const seconds: number = lockoutMs + d.retryAfter + p.resetAfter + stats.fallbackTimeout + index + (refunded ? 1 : 0);
  const fields = rateLimitHeaders(d, 'auth_login', 10 / 900, 10);
  const policy: string = fields['RateLimit-Policy'];
  const ip: string | null = clientIp('10.0.0.1', '203.0.113.7', ['10.0.0.0/8']);
  const key: string = ipKey(ip ?? '::1', 64);
  const middleware = rateLimit(limiter, { limiter: 'auth_login', rate: 5 / 60, burst: 5, trustedProxies: '127.0.0.1' });
  const json = rateLimit(limiter, {
    limiter: 'api', limit: 100, windowMs: '15 minutes', statusCode: 503, message: { error: 'too many requests' },
    skip: (req) => req.headers['x-health'] === '1', requestPropertyName: 'limited',
  });
  const handled = rateLimit(limiter, {
    limiter: 'api', handler: (req, res, next, options) => res.status(options.statusCode ?? 429).json({ retry: req.rateLimit?.retryAfterMs }),
  });
  // @ts-expect-error: skip answers whether to skip
  rateLimit(limiter, { limiter: 'api', skip: 'health' });
  const two = rateLimit(limiter, { limits: (req, addr) => [{ limiter: 'sign_in_ip', key: addr ?? 'none' }, { limiter: 'x', key: String(req.headers.host) }] });
  try {
    await limiter.take('', 'k');
  } catch (err) {
    if (err instanceof RateLimitUsageError) console.log(err.code, err.cause);
    if (err instanceof RateLimitError) console.log(err.code, err.limiter, seconds, waitMs, json, handled, policy, key, middleware, two);
  }
  // @ts-expect-error: the source is one of three
  const wrong: Decision['source'] = 'cache';
  // @ts-expect-error: a window's unit is one of the known ones
  await limiter.take('auth_login', 'ada', { limit: 5, windowMs: '1 fortnight' });
  // @ts-expect-error: a key is text
  await limiter.take('auth_login', 42);
  // @ts-expect-error: a warning's fields come first
  new RateLimiter({ logger: { warn: (message: string) => message } });
  // @ts-expect-error: options are named
  new RateLimiter({ deadline: 250 });
  await limiter.end();
  console.log(wrong);
}
use();
