'use strict';
// A query stalled on a row lock is cancelled at its deadline, directly and
// through PgBouncer in transaction mode; a cancel request that is lost (a
// proxy swallows it) does not block the pool; PgBouncer's transaction
// pooling decides exactly.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const pg = require('pg');
const { RateLimiter } = require('..');
const h = require('./helpers');

// A session that holds the row lock of (limiter, key) in the table store.
async function holdLock(limiter, key) {
  const c = new pg.Client(h.connection('table'));
  await c.connect();
  await c.query('BEGIN');
  await c.query("SET LOCAL ratelimit.in_transaction = 'allow'");
  await c.query('SELECT rl_take($1, $2, 1, 1000)', [limiter, key]);
  return { release: async () => { await c.query('ROLLBACK'); await c.end(); } };
}

// Backends waiting for a lock in rl_take (the holder is idle in its transaction).
async function waiting() {
  const [{ n }] = await h.sql('table', `SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE wait_event_type = 'Lock' AND query LIKE '%rl_take(%'`);
  return n;
}

async function eventually(check, ms) {
  const t0 = performance.now();
  while (!(await check())) {
    if (performance.now() - t0 > ms) return false;
    await h.sleep(50);
  }
  return true;
}

// A TCP proxy to the table cluster that swallows every cancel request: it
// reads it and never answers, never closes.
async function swallowingProxy() {
  const c = h.clusters.table;
  const held = [];
  let swallowed = 0;
  const server = net.createServer((socket) => {
    socket.once('data', (first) => {
      if (first.length >= 8 && first.readInt32BE(4) === 80877102) {
        swallowed++;
        held.push(socket);
        return;
      }
      const upstream = net.connect({ path: `${c.host}/.s.PGSQL.${c.port}` });
      upstream.write(first);
      socket.pipe(upstream).pipe(socket);
      const close = () => { socket.destroy(); upstream.destroy(); };
      socket.on('error', close);
      upstream.on('error', close);
      socket.on('close', close);
      upstream.on('close', close);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    swallowed: () => swallowed,
    close: () => { held.forEach((s) => s.destroy()); server.close(); },
  };
}

test('stalled query: cancelled at the deadline, its pool slot free at once; through PgBouncer in transaction mode too', { skip: h.skip }, async () => {
  for (const via of ['table', 'pgbouncer']) {
    const limiter = h.name('locked');
    const lock = await holdLock(limiter, 'k');
    const rl = new RateLimiter({ connection: h.connection(via), poolSize: 1, backoffMs: 100, logger: h.logger() });
    try {
      const { ms, value } = await h.timed(rl.take(limiter, 'k', { rate: 1, burst: 1000 }));
      assert.ok(ms < 400, `${via}: returns within the deadline (${ms.toFixed(0)} ms)`);
      assert.equal(value.source, 'fallback');
      assert.equal(rl.stats().fallbackTimeout, 1);
      assert.ok(await eventually(async () => (await waiting()) === 0, 3000), `${via}: no backend waits for the lock: the query was cancelled`);
      await h.sleep(150);
      assert.equal((await rl.take(limiter, 'other', { rate: 1, burst: 1000 })).source, 'database', `${via}: the one pool slot serves the next call`);
    } finally {
      await lock.release();
      await rl.end();
    }
  }
});

test('lost cancel: a proxy swallows the cancel request; the pool is not blocked, decisions return to the database', { skip: h.skip }, async () => {
  const proxy = await swallowingProxy();
  const limiter = h.name('lost');
  const lock = await holdLock(limiter, 'k');
  const rl = new RateLimiter({ connection: { ...h.connection('table'), host: '127.0.0.1', port: proxy.port },
    poolSize: 1, backoffMs: 100, cancelTimeoutMs: 60000, logger: h.logger() });
  try {
    const first = await h.timed(rl.take(limiter, 'k', { rate: 1, burst: 1000 }));
    assert.ok(first.ms < 400, `returns within the deadline (${first.ms.toFixed(0)} ms)`);
    assert.equal(first.value.source, 'fallback');
    assert.ok(await eventually(async () => proxy.swallowed() === 1, 2000), 'the cancel request was sent, and lost');
    await h.sleep(150);
    const next = await h.timed(rl.take(limiter, 'other', { rate: 1, burst: 1000 }));
    assert.equal(next.value.source, 'database', 'the pool slot of the lost cancel serves the next call');
    assert.ok(next.ms < 400);
    const { ms } = await h.timed(rl.end());
    assert.ok(ms < 400, 'end() does not wait for the lost cancel');
  } finally {
    await lock.release();
    proxy.close();
  }
});

test('PgBouncer in transaction mode: 4 client connections over 2 server connections decide exactly', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('pgbouncer'), poolSize: 4, deadlineMs: 10000 });
  const limiter = h.name('bouncer');
  const policy = h.name('bouncer_policy');
  await h.sql('table', 'INSERT INTO rl_policies VALUES ($1, $2, 50)', [policy, 1 / 3600]);
  try {
    const ds = await Promise.all(Array.from({ length: 300 }, (_, i) => (i % 2
      ? rl.take(limiter, 'k', { rate: 1 / 3600, burst: 100 })
      : rl.takeAll([{ limiter: policy, key: 'k' }]))));
    assert.equal(ds.filter((d, i) => i % 2 && d.allowed).length, 100, 'explicit: exactly the burst');
    assert.equal(ds.filter((d, i) => !(i % 2) && d.allowed).length, 50, 'take_all by policy: exactly the burst');
    assert.equal(rl.stats().fallback, 0);
    const [{ remaining }] = await h.sql('table', 'SELECT remaining FROM rl_take($1, $2, $3, 100, 0)', [limiter, 'k', 1 / 3600]);
    assert.equal(remaining, 0);
  } finally {
    await rl.end();
  }
});
