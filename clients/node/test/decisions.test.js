'use strict';
// Decisions through the client equal the server's, in both stores: the
// explicit and policy forms, take_all (both forms), refund; bad use is an
// error with the server's SQLSTATE and never a fallback; the pre-check keeps
// a flood off the database; a take_all is one rl_take_all_detail call;
// concurrent calls share one exact burst; the RateLimit fields equal
// rl_headers.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RateLimiter, RateLimitError, rateLimitHeaders } = require('..');
const h = require('./helpers');

const near = (a, b, what) => assert.ok(Math.abs(a - b) < 0.5, `${what}: ${a} is near ${b}`);

// The client's decision and the server's for the same call on a twin key.
function same(d, s, what) {
  assert.equal(d.source, 'database', `${what}: decided by the database`);
  assert.equal(d.allowed, s.allowed, `${what}: allowed`);
  assert.equal(d.remaining, s.remaining, `${what}: remaining`);
  if (s.retry_after === null) assert.equal(d.retryAfter, Infinity, `${what}: never (cost > burst)`);
  else near(d.retryAfter, s.retry_after, `${what}: retry_after`);
  near(d.resetAfter, s.reset_after, `${what}: reset_after`);
}

for (const store of h.stores) {
  test(`decisions (${store} store): the explicit form equals rl_take, peek and cost > burst included`, { skip: h.skip }, async () => {
    const rl = new RateLimiter({ connection: h.connection(store), deadlineMs: 10000 });
    const limiter = h.name('explicit');
    const rate = 1 / 3600;
    try {
      for (const [i, cost] of [1, 1, 0, 2, 1, 1, 4, 0].entries()) {
        const d = await rl.take(limiter, 'client', { rate, burst: 3, cost });
        const [s] = await h.sql(store, 'SELECT * FROM rl_take($1, $2, $3, $4, $5)', [limiter, 'twin', rate, 3, cost]);
        same(d, s, `call ${i + 1} (cost ${cost})`);
      }
      // the server holds what the client was told
      const [peek] = await h.sql(store, 'SELECT * FROM rl_take($1, $2, $3, $4, 0)', [limiter, 'client', rate, 3]);
      assert.equal(peek.remaining, 0);
      assert.deepEqual(rl.stats().database, 8);
    } finally {
      await rl.end();
    }
  });

  test(`decisions (${store} store): policy form, take_all in both forms and refund equal the server's`, { skip: h.skip }, async () => {
    const p1 = h.name('policy');
    const p2 = h.name('shadow');
    await h.sql(store, 'INSERT INTO rl_policies VALUES ($1, $2, 2, false), ($3, $2, 1, true)', [p1, 1 / 3600, p2]);
    const rl = new RateLimiter({ connection: h.connection(store), deadlineMs: 10000 });
    try {
      for (let i = 0; i < 3; i++) {
        same(await rl.take(p1, 'client'), (await h.sql(store, 'SELECT * FROM rl_take($1, $2)', [p1, 'twin']))[0], `policy call ${i + 1}`);
      }
      // a shadow policy never denies
      for (let i = 0; i < 2; i++) assert.equal((await rl.take(p2, 'client')).allowed, true);
      assert.equal(rl.policy(p1).burst, 2);

      const e1 = h.name('all_a');
      const e2 = h.name('all_b');
      const reqs = (key, c2) => [{ limiter: e1, key, rate: 1 / 3600, burst: 2 }, { limiter: e2, key, rate: 1 / 3600, burst: 1, cost: c2 }];
      const sqlAll = (key, c2) => h.sql(store, 'SELECT * FROM rl_take_all($1, $2, $3, $4, $5)',
        [[e1, e2], [key, key], [1 / 3600, 1 / 3600], [2, 1], [1, c2]]);
      const both = async (c2, what) => {
        const d = await rl.takeAll(reqs('client', c2));
        const [s] = await sqlAll('twin', c2);
        same(d, s, what);
        assert.equal(d.limiter, s.limiter, `${what}: the binding limiter`);
        assert.equal(reqs('x')[d.binding].limiter, s.limiter, `${what}: the binding index`);
      };
      await both(1, 'take_all: allowed');
      await both(1, 'take_all: denied by the second');
      await both(2, 'take_all: cost > burst in the second');
      // the denials spent nothing in the other bucket: one of its two is left
      const [left] = await h.sql(store, 'SELECT * FROM rl_take($1, $2, $3, 2, 0)', [e1, 'client', 1 / 3600]);
      assert.equal(left.remaining, 1);
      await both(0, 'take_all: a peek of the second');

      const byPolicy = await rl.takeAll([{ limiter: p1, key: 'all' }, { limiter: p2, key: 'all', cost: 2 }]);
      const [s] = await h.sql(store, 'SELECT * FROM rl_take_all($1, $2, $3)', [[p1, p2], ['all_twin', 'all_twin'], [1, 2]]);
      same(byPolicy, s, 'take_all by policy');
      assert.equal(byPolicy.limiter, s.limiter);

      // refund: a cell back, as rl_refund gives it
      assert.equal(await rl.refund(p1, 'client'), true);
      assert.equal((await h.sql(store, 'SELECT rl_refund($1, $2) AS r', [p1, 'twin']))[0].r, true);
      same(await rl.take(p1, 'client'), (await h.sql(store, 'SELECT * FROM rl_take($1, $2)', [p1, 'twin']))[0], 'after the refund');
      assert.equal(await rl.refund(p1, 'never-taken'), false);
    } finally {
      await rl.end();
    }
  });
}

test('bad use: refused with the server\'s SQLSTATE, never a fallback, never a backoff', { skip: h.skip }, async () => {
  const policy = h.name('owned');
  await h.sql('table', 'INSERT INTO rl_policies VALUES ($1, 1, 5)', [policy]);
  const rl = new RateLimiter({ connection: h.connection('table'), deadlineMs: 10000 });
  const cases = [
    [[null, 'k', 1, 5, 1], '22004'], [['', 'k', 1, 5, 1], '22023'], [['l', null, 1, 5, 1], '22004'],
    [['l', '', 1, 5, 1], '22023'], [['l', 'k', 0, 5, 1], '22023'], [['l', 'k', NaN, 5, 1], '22023'],
    [['l', 'k', 2e6, 5, 1], '22023'], [['l', 'k', 1, 0, 1], '22023'], [['l', 'k', 1, 5, -1], '22023'],
    [['l', 'k', 1e-12, 2147483647, 1], '22023'],
  ];
  try {
    for (const [[limiter, key, rate, burst, cost], code] of cases) {
      await assert.rejects(rl.take(limiter, key, { rate, burst, cost }),
        (err) => err instanceof RateLimitError && err.code === code, `${JSON.stringify([limiter, key, rate, burst, cost])}: ${code}`);
      await assert.rejects(h.sql('table', 'SELECT rl_take($1, $2, $3, $4, $5)', [limiter, key, rate, burst, cost]),
        (err) => err.code === code, `the server says ${code} too`);
    }
    assert.equal(rl.stats().database + rl.stats().fallback, 0, 'no call reached the database');
    await assert.rejects(rl.takeAll([]), { code: '22023' });
    await assert.rejects(rl.takeAll([{ limiter: 'l', key: 'k' }, { limiter: 'l', key: 'k' }]), { code: '22023', index: 1 });
    // what only the database knows
    const unknown = h.name('unknown');
    await assert.rejects(rl.take(unknown, 'k'), (err) => err.code === '42704' && err.limiter === unknown && err.message.includes(unknown));
    await assert.rejects(rl.takeAll([{ limiter: policy, key: 'k' }, { limiter: unknown, key: 'k' }]),
      (err) => err instanceof RateLimitError && err.code === '42704');
    // no privilege: rl_refund is revoked from PUBLIC
    const role = h.name('nopriv');
    await h.sql('table', `CREATE ROLE ${role} LOGIN`);
    const unprivileged = new RateLimiter({ connection: { ...h.connection('table'), user: role }, deadlineMs: 10000 });
    await assert.rejects(unprivileged.refund(policy, 'k'), (err) => err.code === '42501' && err.limiter === policy);
    assert.equal(unprivileged.stats().fallback, 0);
    assert.equal((await unprivileged.take(policy, 'k')).source, 'database', 'no backoff after 42501');
    await unprivileged.end();
    const s = rl.stats();
    assert.equal(s.fallback, 0, 'no fallback decision');
    assert.equal((await rl.take(policy, 'k')).source, 'database', 'no backoff: the next call goes to the database');
  } finally {
    await rl.end();
  }
});

test('takeAll: an error names the element of the arrays that failed', async () => {
  const policy = h.name('owned');
  await h.sql('table', 'INSERT INTO rl_policies VALUES ($1, 1, 5)', [policy]);
  const rl = new RateLimiter({ connection: h.connection('table'), deadlineMs: 10000 });
  const unknown = h.name('unknown');
  try {
    await assert.rejects(rl.takeAll([{ limiter: policy, key: 'k' }, { limiter: unknown, key: 'k' }]),
      (err) => err.code === '42704' && err.limiter === unknown && err.index === 1);
  } finally {
    await rl.end();
  }
});

for (const store of h.stores) {
  test(`pre-check (${store} store): 10 000 calls at burst 10 make 20 rl_take calls${store === 'table' ? ' and 10 writes' : ''}; within the limit, every call reaches the database`, { skip: h.needsExtension('CREATE EXTENSION ratelimit, in the database of its own that counts its calls') }, async () => {
    // a database of its own: its statistics count this test's sessions only
    const db = h.name('flood');
    await h.sql(store, `CREATE DATABASE ${db}`);
    await h.sql(store, 'CREATE EXTENSION ratelimit', [], db);
    const counts = async () => (await h.sql(store, `SELECT
        (SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'rl_take')::int AS calls,
        (SELECT coalesce(n_tup_ins + n_tup_upd, 0) FROM pg_stat_user_tables WHERE relname = 'rl_buckets')::int AS writes`, [], db))[0];
    // the other sessions of the database, by pid
    const sessions = async () => (await h.sql(store, `SELECT pid FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`, [], db)).map((r) => r.pid);
    // a session's counters reach the views when its backend has exited,
    // after it left pg_stat_activity: wait for the processes themselves
    const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
    const settle = async (pids) => {
      const until = performance.now() + 20000;
      while (pids.some(alive)) {
        assert.ok(performance.now() < until, `the backends ${pids} exit within 20 s`);
        await h.sleep(20);
      }
      return counts();
    };
    const before = await settle(await sessions());
    const rl = new RateLimiter({ connection: h.connection(store, db), deadlineMs: 10000 });
    const limiter = h.name('flood');
    let allowed = 0;
    for (let i = 0; i < 10000; i++) if ((await rl.take(limiter, 'k', { rate: 1 / 3600, burst: 10 })).allowed) allowed++;
    const s = rl.stats();
    const pids = await sessions();
    assert.ok(pids.length > 0, 'the client\'s sessions are open');
    await rl.end();
    const after = await settle(pids);
    assert.equal(allowed, 10);
    assert.equal(s.database, 20);
    assert.equal(s.local, 9980);
    // the settle calls themselves are not rl_take calls
    assert.equal(after.calls - before.calls, 20, 'rl_take calls');
    if (store === 'table') assert.equal(after.writes - before.writes, 10, 'rows written');

    const steady = new RateLimiter({ connection: h.connection(store), deadlineMs: 10000 });
    const paced = h.name('paced');
    try {
      for (let i = 0; i < 12; i++) {
        const d = await steady.take(paced, 'k', { rate: 20, burst: 2 });
        assert.equal(d.source, 'database', `paced call ${i + 1}`);
        await h.sleep(60);	// below the limit's rate of one per 50 ms
      }
    } finally {
      await steady.end();
    }
  });
}

test('takeAll in both forms: one rl_take_all_detail call each, no rl_take (pg_stat_user_functions)', { skip: h.needsExtension('CREATE EXTENSION ratelimit, in the database of its own that counts its calls') }, async () => {
  // a database of its own: its statistics count this test's calls only
  const db = h.name('detail');
  await h.sql('table', `CREATE DATABASE ${db}`);
  await h.sql('table', 'CREATE EXTENSION ratelimit', [], db);
  await h.sql('table', "INSERT INTO rl_policies VALUES ('detail', 1, 100)", [], db);
  const rl = new RateLimiter({ connection: h.connection('table', db), deadlineMs: 10000 });
  try {
    for (let i = 0; i < 3; i++) {
      await rl.takeAll([{ limiter: 'detail_x', key: 'a', rate: 1, burst: 100 }, { limiter: 'detail_x', key: 'b', rate: 1, burst: 100 }]);
      await rl.takeAll([{ limiter: 'detail', key: 'a' }, { limiter: 'detail', key: 'b' }]);
    }
    assert.equal(rl.stats().database, 6);
  } finally {
    await rl.end();
  }
  const counted = `SELECT funcname, sum(calls)::int AS n FROM pg_stat_user_functions
    WHERE funcname IN ('rl_take', 'rl_take_all', 'rl_take_all_detail') GROUP BY funcname`;
  // a backend reports its calls when it ends or idles: wait for them
  const until = performance.now() + 20000;
  let seen;
  do {
    await h.sleep(100);
    seen = Object.fromEntries((await h.sql('table', counted, [], db)).map((r) => [r.funcname, r.n]));
  } while (Object.values(seen).reduce((a, b) => a + b, 0) < 6 && performance.now() < until);
  assert.deepEqual(seen, { rl_take_all_detail: 6 }, 'no peek: rl_take_all_detail once per call, and nothing else');
});

test('event loop: 300 concurrent calls over one burst of 100 allow exactly 100, by the database and in memory', { skip: h.skip }, async () => {
  // the memory store where there is one
  const rl = new RateLimiter({ connection: h.connection(h.stores.at(-1)), deadlineMs: 10000 });
  const limiter = h.name('concurrent');
  try {
    const ds = await Promise.all(Array.from({ length: 300 }, () => rl.take(limiter, 'k', { rate: 1 / 3600, burst: 100 })));
    assert.equal(ds.filter((d) => d.allowed).length, 100);
    assert.equal(ds.filter((d) => d.source === 'database').length, 200, 'the pre-check lets twice the burst through');
  } finally {
    await rl.end();
  }
  // nothing listens on port 1: after one failure, every decision is made in memory
  const down = new RateLimiter({ connection: { host: '127.0.0.1', port: 1 }, logger: h.logger() });
  await down.take('concurrent', 'first', { rate: 1 / 3600, burst: 100 });
  const ds = await Promise.all(Array.from({ length: 300 }, () => down.take('concurrent', 'k', { rate: 1 / 3600, burst: 100 })));
  assert.equal(ds.filter((d) => d.allowed).length, 100);
  assert.ok(ds.every((d) => d.source === 'fallback'));
  await down.end();
});

test('HTTP fields: rateLimitHeaders equals rl_headers for allowed, denied and never-allowed decisions', { skip: h.skip }, async () => {
  const limiter = h.name('headers');
  let compared = 0;
  for (const [rate, burst, cost, times] of [[5 / 60, 5, 1, 7], [3, 2, 1, 4], [0.7, 3, 2, 3], [1 / 3600, 2, 3, 1]]) {
    for (let i = 0; i < times; i++) {
      const [row] = await h.sql('table', `SELECT d.*, rl_headers(d, $1, $3, $4) AS headers FROM rl_take($1, $2, $3, $4, $5) AS d`,
        [limiter, `k${rate}`, rate, burst, cost]);
      const d = { allowed: row.allowed, remaining: row.remaining, retryAfter: row.retry_after ?? Infinity, resetAfter: row.reset_after };
      assert.deepEqual(rateLimitHeaders(d, limiter, rate, burst), row.headers, `rate ${rate} burst ${burst}, call ${i + 1}`);
      compared++;
    }
  }
  assert.equal(compared, 15);
  assert.throws(() => rateLimitHeaders({ allowed: true, remaining: 1, retryAfter: 0, resetAfter: 0 }, 'é', 1, 2), { code: '22023' });
});
