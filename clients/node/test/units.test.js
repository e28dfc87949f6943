'use strict';
// One unit: a limit given as { limit, windowMs } (ms or a duration such as
// '1 m') decides as rl_take at rate = limit per window and burst = limit;
// every decision answers its limit and milliseconds (retryAfterMs,
// resetAfterMs, reset in epoch ms) beside the seconds of rl_take.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RateLimiter, RateLimitError } = require('..');
const h = require('./helpers');

// ms of a decision's seconds, whole and rounded up
const ceilMs = (s) => Math.ceil(Math.round(s * 1e6) / 1000);

function inMs(d, limit, what) {
  assert.equal(d.limit, limit, `${what}: limit`);
  assert.equal(d.retryAfterMs, Number.isFinite(d.retryAfter) ? ceilMs(d.retryAfter) : Infinity, `${what}: retryAfterMs`);
  assert.equal(d.resetAfterMs, ceilMs(d.resetAfter), `${what}: resetAfterMs`);
  assert.ok(Math.abs(d.reset - (Date.now() + d.resetAfterMs)) < 1000, `${what}: reset ${d.reset} is now + resetAfterMs`);
}

test('units: { limit, windowMs } decides as rl_take(rate = limit per window, burst = limit), with ms and limit in the answer', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table'), deadlineMs: 10000 });
  const limiter = h.name('window');
  try {
    for (let i = 0; i < 7; i++) {
      const d = await rl.take(limiter, 'client', { limit: 5, windowMs: 60000 });
      const [s] = await h.sql('table', 'SELECT * FROM rl_take($1, $2, 5.0 / 60, 5)', [limiter, 'twin']);
      assert.equal(d.source, 'database');
      assert.deepEqual([d.allowed, d.remaining], [s.allowed, s.remaining], `call ${i + 1}`);
      assert.ok(Math.abs(d.retryAfter - s.retry_after) < 0.5 && Math.abs(d.resetAfter - s.reset_after) < 0.5, `call ${i + 1}: seconds`);
      inMs(d, 5, `call ${i + 1}`);
    }
    const denied = await rl.take(limiter, 'client', { limit: 5, windowMs: '1 m' });
    assert.equal(denied.allowed, false);
    assert.ok(denied.retryAfterMs > 11000 && denied.retryAfterMs <= 12000, `retryAfterMs ${denied.retryAfterMs}: one cell of 12 s`);
    // the old form names the same bucket and limit
    const old = await rl.take(limiter, 'client', { rate: 5 / 60, burst: 5, cost: 0 });
    assert.equal(old.remaining, 0);
    inMs(old, 5, 'rate and burst');
    // never: cost > burst has no retryAfterMs either
    inMs(await rl.take(limiter, 'other', { limit: 5, windowMs: 60000, cost: 6 }), 5, 'cost > burst');

    // durations: one cell of limit 2 is half the window
    for (const [windowMs, seconds] of [['1 m', 60], ['15 minutes', 900], ['10 s', 10], ['1h', 3600], ['2 days', 172800],
      ['1500 ms', 1.5], ['0.5 s', 0.5], [90000, 90], ['3 Hours', 10800]]) {
      const d = await rl.take(h.name('duration'), 'k', { limit: 2, windowMs });
      assert.ok(Math.abs(d.resetAfter - seconds / 2) < 0.01, `${JSON.stringify(windowMs)}: resetAfter ${d.resetAfter} is ${seconds / 2}`);
    }

    // takeAll: the binding request's limit; the forms may be mixed
    const all = await rl.takeAll([{ limiter: h.name('all_a'), key: 'k', limit: 10, windowMs: '1 h' },
      { limiter: h.name('all_b'), key: 'k', rate: 1 / 3600, burst: 1 }]);
    assert.deepEqual([all.binding, all.remaining], [1, 0]);
    inMs(all, 1, 'takeAll');

    // a policy's limit is its burst, as last read
    const policy = h.name('policy');
    await h.sql('table', 'INSERT INTO rl_policies VALUES ($1, $2, 3)', [policy, 1 / 60]);
    inMs(await rl.take(policy, 'k'), 3, 'policy');
  } finally {
    await rl.end();
  }
});

test('units: a bad limit or window is bad use (22023, naming the argument), checked before any round trip', async () => {
  const rl = new RateLimiter({ connection: { host: '127.0.0.1', port: 1 }, logger: h.logger() });
  const cases = [
    [{ limit: 5 }, 'windowMs'], [{ windowMs: 1000 }, 'limit'], [{ limit: 0, windowMs: 1000 }, 'limit'],
    [{ limit: 1.5, windowMs: 1000 }, 'limit'], [{ limit: '5', windowMs: 1000 }, 'limit'],
    [{ limit: 5, windowMs: 0 }, 'windowMs'], [{ limit: 5, windowMs: -1 }, 'windowMs'], [{ limit: 5, windowMs: Infinity }, 'windowMs'],
    [{ limit: 5, windowMs: '1 fortnight' }, 'windowMs'], [{ limit: 5, windowMs: 'm' }, 'windowMs'], [{ limit: 5, windowMs: '-1 m' }, 'windowMs'],
    [{ limit: 5, windowMs: '0 s' }, 'windowMs'], [{ limit: 5, windowMs: {} }, 'windowMs'],
    [{ limit: 5, windowMs: 1000, rate: 1 }, 'not both'], [{ limit: 5, windowMs: 1000, burst: 5 }, 'not both'],
    // a window whose rate rl_take refuses
    [{ limit: 5, windowMs: 0.001 }, 'rate'],
  ];
  try {
    for (const [options, named] of cases) {
      await assert.rejects(rl.take('units', 'k', options),
        (err) => err instanceof RateLimitError && err.code === '22023' && err.message.includes(named) && err.limiter === 'units',
        `${JSON.stringify(options)} names ${named}`);
    }
    await assert.rejects(rl.takeAll([{ limiter: 'a', key: 'k', limit: 1, windowMs: '1 m' }, { limiter: 'b', key: 'k', limit: 1, windowMs: 'soon' }]),
      (err) => err.code === '22023' && err.index === 1 && err.message.includes('windowMs'));
    await assert.rejects(rl.takeAll([{ limiter: 'a', key: 'k', limit: 1, windowMs: '1 m' }, { limiter: 'b', key: 'k' }]), { code: '22023' },
      'a limit in one request and a policy in another');
    assert.equal(rl.stats().fallback + rl.stats().database, 0, 'no call was decided');
  } finally {
    await rl.end();
  }
});
