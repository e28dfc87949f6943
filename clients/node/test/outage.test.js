'use strict';
// Outages: the server stopped, refused, and stalled by SIGSTOP of its own
// processes.  Every call returns within the deadline plus a margin and
// decides in memory at the same limit, continuing from the database's last
// answer; one warning per limiter; counters by reason; one attempt per
// backoff interval; back to the database after the backoff.  Memory stays
// bounded and never fails open; policies last known decide.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RateLimiter } = require('..');
const h = require('./helpers');

const DEADLINE = 400;
// what a loaded machine's event loop adds to a call: below one more
// deadline, it still tells one deadline from two, and a call that waited
// for the frozen server would wait until it is thawed
const MARGIN = 350;
const within = (ms, what) => assert.ok(ms < DEADLINE + MARGIN, `${what}: ${ms.toFixed(0)} ms is within the deadline`);
const down = { host: '127.0.0.1', port: 1 };	// nothing listens there: refused

// Until rl's database decides again, at most 10 s; then it must have come
// back within a backoff interval and a deadline of each probe (a call that
// moves the end of the backoff).  A loaded machine may take longer than a
// deadline to connect to the server back: that probe times out, and the
// database decides again at the first probe that connects in time.
async function untilDatabase(rl, call) {
  const t0 = performance.now();
  let probes = 0;
  for (;;) {
    const due = rl.retryDbAt;
    const d = await call();
    if (rl.retryDbAt !== due) probes++;
    const ms = performance.now() - t0;
    if (d.source === 'database') {
      const bound = probes * (rl.options.backoffMs + DEADLINE + MARGIN);
      assert.ok(ms < bound, `back to the database after ${ms.toFixed(0)} ms and ${probes} probes: within ${bound} ms`);
      return;
    }
    assert.ok(ms < 10000, 'back to the database within 10 s');
    await h.sleep(50);
  }
}

test('stopped server: in memory within the deadline from the last answer, one warning per limiter, counters; back after the backoff', { skip: h.skip }, async () => {
  const log = h.logger();
  const rl = new RateLimiter({ connection: h.connection('outage'), deadlineMs: DEADLINE, backoffMs: 500, logger: log });
  const limiter = h.name('stopped');
  const policy = h.name('stopped_policy');
  const later = h.name('later_policy');
  const shadow = h.name('stopped_shadow');
  await h.sql('outage', 'INSERT INTO rl_policies VALUES ($1, $2, 3, false), ($3, $2, 1, true)', [policy, 1 / 3600, shadow]);
  const take = () => rl.take(limiter, 'k', { rate: 1 / 3600, burst: 5 });
  try {
    for (let i = 0; i < 3; i++) assert.equal((await take()).source, 'database');
    assert.equal((await rl.take(policy, 'k')).remaining, 2);
    // made after the client read rl_policies: never read
    await h.sql('outage', 'INSERT INTO rl_policies VALUES ($1, 1, 1)', [later]);
    h.stop('outage');
    const ds = [];
    for (let i = 0; i < 4; i++) {
      const { ms, value } = await h.timed(take());
      within(ms, `call ${i + 1} with the server stopped`);
      ds.push(value);
    }
    assert.deepEqual(ds.map((d) => [d.source, d.allowed, d.remaining]),
      [['fallback', true, 1], ['fallback', true, 0], ['fallback', false, 0], ['fallback', false, 0]],
      'the 2 of 5 left before the outage, and no more');
    assert.ok(ds[2].retryAfter > 3590 && ds[2].retryAfter <= 3600, `retry_after ${ds[2].retryAfter} s: one cell at 1/3600`);
    // the last policies read decide; one never read is refused
    assert.deepEqual([(await rl.take(policy, 'k')).allowed, (await rl.take(policy, 'k')).allowed, (await rl.take(policy, 'k')).allowed],
      [true, true, false]);
    // a shadow policy is decided in memory as an enforced one, and never denies
    const shadowed = [];
    for (let i = 0; i < 3; i++) shadowed.push(await rl.take(shadow, 'k'));
    assert.deepEqual(shadowed.map((d) => [d.source, d.allowed, d.remaining]),
      [['fallback', true, 0], ['fallback', true, 0], ['fallback', true, 0]]);
    const never = await rl.take(later, 'k');
    assert.equal(never.allowed, false);
    assert.equal(never.source, 'fallback');
    const s = rl.stats();
    assert.equal(s.fallback, 11);
    assert.equal(s.fallbackError, 11, 'the reason: an error (refused, terminated)');
    assert.equal(s.fallbackTimeout, 0);
    assert.equal(s.noPolicy, 1);
    assert.equal(log.lines.filter((l) => l.includes(`"${limiter}"`)).length, 1, 'one warning for the limiter');
    assert.equal(log.lines.filter((l) => l.includes(`"${policy}"`)).length, 1, 'one for the policy');
    assert.equal(log.lines.length, 4);
    assert.match(log.lines[0], /is decided in memory at the same limit: the database failed \(error: .*\); it is tried again at most every 500 ms/);
    // the same as fields, for a structured logger (pino's order: fields, message)
    assert.deepEqual(log.fields[0], { reason: 'error', detail: log.fields[0].detail, backoffMs: 500, limiter });
    assert.ok(log.fields[0].detail && log.lines[0].includes(`(error: ${log.fields[0].detail})`), log.fields[0].detail);
  } finally {
    h.start('outage');
  }
  try {
    await untilDatabase(rl, () => rl.take(limiter, 'k2', { rate: 1 / 3600, burst: 5 }));
    assert.equal((await rl.take(later, 'k')).source, 'database', 'the new policy is read');
  } finally {
    await rl.end();
  }
});

test('refused connection: a client that never reached the database decides explicit calls in memory and refuses policies it never read', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: down, logger: h.logger() });
  const ds = [];
  for (let i = 0; i < 3; i++) ds.push(await rl.take('refused', 'k', { rate: 1 / 3600, burst: 2 }));
  assert.deepEqual(ds.map((d) => [d.source, d.allowed]), [['fallback', true], ['fallback', true], ['fallback', false]]);
  const p = await rl.take('some_policy', 'k');
  assert.deepEqual([p.source, p.allowed, p.remaining], ['fallback', false, 0]);
  assert.ok(p.retryAfter > 0 && p.retryAfter <= 1, 'retry when the database is tried again');
  assert.equal(rl.stats().noPolicy, 1);
  const all = await rl.takeAll([{ limiter: 'refused', key: 'a', rate: 1, burst: 1 }, { limiter: 'refused', key: 'b', rate: 1, burst: 1, cost: 2 }]);
  assert.deepEqual([all.allowed, all.binding, all.retryAfter], [false, 1, Infinity], 'take_all in memory: cost > burst binds');
  assert.equal((await rl.take('refused', 'a', { rate: 1, burst: 1 })).allowed, true, 'the denied take_all spent nothing');
  await rl.end();
});

test('stalled server (SIGSTOP): every call within the deadline, in memory (timeout), connecting and end() too; one attempt per backoff interval; back after SIGCONT', { skip: h.skip }, async () => {
  const log = h.logger();
  const rl = new RateLimiter({ connection: h.connection('outage'), deadlineMs: DEADLINE, backoffMs: 600, poolSize: 2, logger: log });
  const limiter = h.name('stalled');
  const take = (key = 'k') => rl.take(limiter, key, { rate: 1 / 3600, burst: 10 });
  // ended in every exit path: its idle connection would keep the test alive
  const idle = new RateLimiter({ connection: h.connection('outage'), deadlineMs: DEADLINE });
  try {
    for (let i = 0; i < 4; i++) assert.equal((await take()).source, 'database');
    assert.equal((await idle.take(limiter, 'idle', { rate: 1, burst: 1 })).source, 'database');
    h.freeze('outage');
    try {
      const first = await h.timed(take());
      within(first.ms, 'the first call');
      assert.ok(first.ms >= DEADLINE - 20, 'it waited for its deadline');
      assert.deepEqual([first.value.source, first.value.remaining], ['fallback', 5], 'from the database\'s last answer');
      // in the backoff: nobody waits
      const burst = await h.timed(Promise.all(Array.from({ length: 20 }, (_, i) => take(`b${i}`))));
      assert.ok(burst.ms < DEADLINE - 20, `20 calls in the backoff take ${burst.ms.toFixed(0)} ms: none waited for a deadline`);
      assert.ok(burst.value.every((d) => d.source === 'fallback'));
      await h.sleep(650);
      // after the backoff: one call tries the database, the others decide at once
      const t0 = performance.now();
      const times = await Promise.all(Array.from({ length: 10 }, (_, i) => take(`c${i}`).then(() => performance.now() - t0)));
      times.forEach((ms, i) => within(ms, `concurrent call ${i + 1}`));
      assert.equal(times.filter((ms) => ms >= DEADLINE - 20).length, 1, 'one attempt on the database');
      // a new connection to a frozen server does not hold either
      const fresh = new RateLimiter({ connection: h.connection('outage'), deadlineMs: DEADLINE, logger: h.logger() });
      const connecting = await h.timed(fresh.take(limiter, 'k', { rate: 1 / 3600, burst: 10 }));
      within(connecting.ms, 'connecting to the frozen server');
      assert.equal(connecting.value.source, 'fallback');
      await fresh.end();
      within((await h.timed(idle.end())).ms, 'end() with an idle connection to the frozen server');
      const s = rl.stats();
      assert.equal(s.fallbackTimeout, 31);
      assert.equal(s.fallbackError, 0);
      assert.equal(log.lines.length, 1);
      assert.ok(log.lines[0].includes(`(timeout: no answer within ${DEADLINE} ms)`), log.lines[0]);
    } finally {
      h.thaw();
    }
    await untilDatabase(rl, () => take('after'));
    // the abandoned queries were cancelled or their sessions closed
    let active;
    for (let i = 0; i < 40; i++) {
      [{ active }] = await h.sql('outage', `SELECT count(*)::int AS active FROM pg_stat_activity
        WHERE application_name = 'ratelimit_client' AND state = 'active'`);
      if (active === 0) break;
      await h.sleep(100);
    }
    assert.equal(active, 0, 'no query of the frozen time still runs');
  } finally {
    h.thaw();
    await rl.end();
    await idle.end();
  }
});

test('bounded memory: maxKeys keys at most; with the database every decision exact, in an outage only full buckets make room', { skip: h.skip }, async (t) => {
  const rl = new RateLimiter({ connection: h.connection('table'), maxKeys: 8, deadlineMs: 10000 });
  const limiter = h.name('keys');
  try {
    for (let round = 0; round < 2; round++) {
      for (let k = 0; k < 40; k++) {
        const d = await rl.take(limiter, `k${k}`, { rate: 1 / 3600, burst: 2 });
        assert.deepEqual([d.source, d.allowed, d.remaining], ['database', true, 1 - round], `key ${k}, round ${round + 1}`);
      }
    }
    assert.equal(rl.stats().keys, 8);
    assert.equal(rl.stats().evictions, 72);
  } finally {
    await rl.end();
  }

  const out = new RateLimiter({ connection: down, maxKeys: 4, logger: h.logger() });
  let allowed = 0;
  let refused = null;
  for (let i = 0; i < 200; i++) {
    const d = await out.take('hammered', `k${i % 10}`, { rate: 1 / 3600, burst: 2 });
    if (d.allowed) allowed++;
    else if (i % 10 >= 4) refused = d;
  }
  assert.equal(allowed, 8, '4 keys with room, 2 each; never more');
  assert.ok(refused.retryAfter > 7000, `a key without room: retry when a bucket is full again (${refused.retryAfter} s)`);
  assert.ok(out.stats().noRoom > 0);
  assert.equal(out.stats().keys, 4);
  // buckets full again make room: a minute passes on the client's clock,
  // so the machine's speed never fills them early
  const clock = h.clock(t);
  const fast = new RateLimiter({ connection: down, maxKeys: 2, logger: h.logger() });
  const f = (k) => fast.take('fast', k, { rate: 1 / 60, burst: 1 });
  assert.equal((await f('a')).allowed, true);
  assert.equal((await f('b')).allowed, true);
  const none = await f('c');
  assert.equal(none.allowed, false);
  assert.ok(none.retryAfter > 0 && none.retryAfter <= 60, `retry when the first bucket is full (${none.retryAfter} s)`);
  clock.advance(30000);
  assert.equal((await f('c')).allowed, false, 'half a minute later, no bucket is full yet');
  clock.advance(30000);
  assert.equal((await f('c')).allowed, true);
  await out.end();
  await fast.end();
});

test('warnings: at most one per limiter per interval; past 1024 limiters one summary line per interval', { skip: h.skip }, async (t) => {
  const log = h.logger();
  const rl = new RateLimiter({ connection: down, logger: log });
  const round = async () => {
    for (let i = 0; i < 2000; i++) {
      for (let j = 0; j < 2; j++) await rl.take(`limiter${i}`, 'k', { rate: 1, burst: 1 });
    }
  };
  await round();
  const named = log.lines.filter((l) => l.startsWith('ratelimit: limiter "'));
  assert.equal(named.length, 1024);
  assert.equal(new Set(named).size, 1024, 'no limiter named twice');
  assert.equal(log.lines.length, 1025);
  assert.deepEqual(Object.keys(log.fields[1024]).sort(), ['backoffMs', 'detail', 'namedLimiters', 'reason']);
  assert.equal(log.fields[1024].namedLimiters, 1024);
  assert.match(log.lines[1024], /^ratelimit: more than 1024 limiters are decided in memory at the same limit: .*; only 1024 are named, each at most once per 60000 ms/);
  await round();
  assert.equal(log.lines.length, 1025, 'within the interval: not one more line');
  await rl.end();

  // after the interval, a limiter is named again: the interval passes on
  // the client's clock, so a slow machine never ends it early
  const clock = h.clock(t);
  const short = h.logger();
  const quick = new RateLimiter({ connection: down, warningIntervalMs: 60000, logger: short });
  const three = async () => { for (const l of ['a', 'b', 'c']) await quick.take(l, 'k', { rate: 1, burst: 1 }); };
  await three();
  await three();
  assert.equal(short.lines.length, 3);
  clock.advance(30000);
  await three();
  assert.equal(short.lines.length, 3, 'half the interval later: not named again');
  clock.advance(30000);
  await three();
  assert.equal(short.lines.length, 6);
  assert.deepEqual(short.lines.slice(3).map((l) => l.split('"')[1]), ['a', 'b', 'c']);
  await quick.end();
});

test('policies: the copy of rl_policies is read at most every policyRefreshMs; the database decides by a new policy at once', { skip: h.skip }, async (t) => {
  const policy = h.name('refresh');
  await h.sql('table', 'INSERT INTO rl_policies VALUES ($1, 1, 2)', [policy]);
  // the interval passes on the client's clock: however slow the calls
  // within it, none of them reads the policies again
  const clock = h.clock(t);
  const rl = new RateLimiter({ connection: h.connection('table'), policyRefreshMs: 60000, deadlineMs: 10000 });
  try {
    await rl.take(policy, 'k');
    await Promise.all(Array.from({ length: 5 }, (_, i) => rl.take(policy, `c${i}`)));
    assert.equal(rl.stats().policyReads, 1, 'one read for the first call and those within the interval');
    await h.sql('table', 'UPDATE rl_policies SET burst = 5 WHERE limiter = $1', [policy]);
    clock.advance(30000);
    await rl.take(policy, 'k2');
    assert.equal(rl.policy(policy).burst, 2, 'the copy is not older than policyRefreshMs');
    clock.advance(30000);
    const d = await rl.take(policy, 'k3');
    assert.equal(d.remaining, 4, 'the database decides by the new policy at once');
    assert.equal(rl.policy(policy).burst, 5);
    assert.equal(rl.stats().policyReads, 2);
  } finally {
    await rl.end();
  }
});

test('a lockout the database started: the pre-check refuses the key for the lock\'s remainder, the fallback keeps it during an outage and starts the next one grown', { skip: h.skip }, async (t) => {
  const policy = h.name('lockout_policy');
  await h.sql('outage', `INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max)
    VALUES ($1, $2, 2, interval '10 minutes', 2, interval '1 hour')`, [policy, 1 / 3600]);
  // the lock's end passes on the client's clock, never the machine's
  const clock = h.clock(t);
  const rl = new RateLimiter({ connection: h.connection('outage'), deadlineMs: DEADLINE, backoffMs: 500, logger: h.logger() });
  try {
    const allowed = [await rl.take(policy, 'k'), await rl.take(policy, 'k')];
    assert.deepEqual(allowed.map((d) => [d.source, d.allowed]), [['database', true], ['database', true]]);
    assert.deepEqual(rl.policy(policy), {
      rate: 1 / 3600, burst: 2, shadow: false, lockoutMs: 600000, lockoutGrowth: 2, lockoutMaxMs: 3600000,
    });
    const lock = await rl.take(policy, 'k');
    assert.deepEqual([lock.source, lock.allowed, lock.retryAfter], ['database', false, 600], 'the database starts a lockout');
    const local = await rl.take(policy, 'k');
    assert.deepEqual([local.source, local.allowed, local.remaining], ['local', false, 0], 'the pre-check refuses the locked key');
    assert.ok(local.retryAfter > 590 && local.retryAfter <= 600, `retryAfter ${local.retryAfter} s: the lock's remainder`);
    assert.equal((await rl.take(policy, 'other')).source, 'database', 'another key is not locked');
    h.stop('outage');
    clock.advance(300000);
    const held = await rl.take(policy, 'k');
    assert.deepEqual([held.source, held.allowed, held.remaining], ['fallback', false, 0], 'the fallback keeps the lock');
    assert.ok(held.retryAfter > 290 && held.retryAfter <= 300, `retryAfter ${held.retryAfter} s: the lock's remainder`);
    // the lock has ended, the two cells are still spent: a new offence within
    // the last lockout's length is locked for twice as long
    clock.advance(301000);
    const again = await rl.take(policy, 'k');
    assert.deepEqual([again.source, again.allowed, again.retryAfter], ['fallback', false, 1200], 'the next lockout, grown');
  } finally {
    h.start('outage');
    await rl.end();
  }
});
