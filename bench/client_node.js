'use strict';
// Decisions per second through the Node client (clients/node), beside the
// bare driver: node bench/client_node.js HOST PORT SECONDS.  Callers are
// concurrent async loops on the one event loop; each figure is the median
// of three runs of SECONDS after a warm-up.
//   database  every call an allowed, written decision through the client
//   bare      the same SELECT through a pg.Pool of the same size
//   pre-check one key far over its limit: refused locally
//   fallback  nothing listens: decided in memory
const { createRequire } = require('node:module');
const { RateLimiter } = require('../clients/node');
// the driver the client runs on, from the client's own packages
const pg = createRequire(require.resolve('../clients/node/package.json'))('pg');

const [host, port, seconds = '3'] = process.argv.slice(2);
const connection = { host, port: Number(port), database: 'postgres' };
const ms = Number(seconds) * 1000;
const SQL = 'SELECT allowed, remaining, retry_after, reset_after FROM rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)';

async function once(callers, call, runMs) {
  let n = 0;
  const end = performance.now() + runMs;
  await Promise.all(Array.from({ length: callers }, async (_, c) => {
    while (performance.now() < end) {
      await call(c, n);
      n++;
    }
  }));
  return n / (runMs / 1000);
}

// The median of three runs, after a warm-up (the JIT, the connections).
async function rate(callers, call) {
  await once(callers, call, 500);
  const runs = [];
  for (let i = 0; i < 3; i++) runs.push(await once(callers, call, ms));
  return runs.sort((a, b) => a - b)[1];
}

const fmt = (x) => Math.round(x).toLocaleString('en-US').replace(/,/g, ' ');

(async () => {
  const rows = [];
  for (const callers of [1, 8]) {
    // a 5 s deadline: a stall of a busy machine must not move decisions to another path
    const rl = new RateLimiter({ connection, deadlineMs: 5000, poolSize: 4 });
    const pool = new pg.Pool({ ...connection, max: 4 });
    const db = await rate(callers, (c, i) => rl.take('bench_db', `k${c}_${i % 1000}`, { rate: 1000, burst: 1000000 }));
    const bare = await rate(callers, (c, i) => pool.query(SQL, ['bench_bare', `k${c}_${i % 1000}`, 1000, 1000000, 1]));
    const s = rl.stats();
    if (s.fallback + s.local > 0) console.error(`note: ${s.fallback} fallbacks, ${s.local} local in the database run`);
    const pre = await rate(callers, () => rl.take('bench_local', 'k', { rate: 1 / 3600, burst: 1 }));
    await rl.end();
    await pool.end();
    const down = new RateLimiter({ connection: { host: '127.0.0.1', port: 1 }, backoffMs: 3600000, logger: { warn() {} } });
    const fallback = await rate(callers, (c, i) => down.take('bench_fallback', `k${i % 1000}`, { rate: 1000000, burst: 1000000 }));
    await down.end();
    rows.push({ callers, db, bare, pre, fallback });
  }
  console.log('| path | 1 caller | 8 callers |');
  console.log('| --- | --- | --- |');
  const line = (name, f) => console.log(`| ${name} | ${rows.map(f).join(' | ')} |`);
  line('database, through the client', (r) => fmt(r.db));
  line('database, bare pg.Pool query', (r) => fmt(r.bare));
  line('client / bare', (r) => `${(r.db / r.bare).toFixed(2)}`);
  line('pre-check (one key far over its limit)', (r) => fmt(r.pre));
  line('fallback (no database)', (r) => fmt(r.fallback));
})();
