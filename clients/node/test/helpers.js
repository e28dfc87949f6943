'use strict';
// What the tests against real clusters share: the clusters test/clients/
// node.pl started (RL_CLUSTERS), SQL on them as their superuser, stopping,
// starting and freezing (SIGSTOP) a cluster's own processes, a logger that
// keeps the warnings, and a clock the tests move forward.
const os = require('node:os');
const { execFileSync } = require('node:child_process');
const pg = require('pg');

const clusters = process.env.RL_CLUSTERS ? JSON.parse(process.env.RL_CLUSTERS) : null;
// without clusters (a plain npm test), the tests that need one are skipped
const skip = clusters === null ? 'needs the clusters of test/clients/node.pl' : false;
// RL_SQL_EDITION=1: the table cluster has the SQL edition (managed/) instead
// of the C extension, and is the only one
const sqlEdition = process.env.RL_SQL_EDITION === '1';
const stores = sqlEdition ? ['table'] : ['table', 'memory'];
// the skip of a test that reads a part of the C extension the SQL edition lacks
const needsExtension = (what) => skip || (sqlEdition ? `the SQL edition has no ${what}` : false);

function connection(name, database = 'postgres') {
  const c = clusters[name];
  return { host: c.host, port: c.port, database, user: os.userInfo().username };
}

async function sql(name, text, values = [], database = 'postgres') {
  const client = new pg.Client(connection(name, database));
  await client.connect();
  try {
    return (await client.query(text, values)).rows;
  } finally {
    await client.end();
  }
}

function pgCtl(name, ...args) {
  const c = clusters[name];
  execFileSync(`${process.env.RL_PG_BIN}/pg_ctl`, ['-D', c.pgdata, '-l', c.log, '-w', ...args], { stdio: 'ignore' });
}

const stop = (name) => pgCtl(name, '-m', 'fast', 'stop');
const start = (name) => pgCtl(name, 'start');

// The postmaster of the cluster and its children: its own processes only.
function processes(name) {
  const fs = require('node:fs');
  const pid = Number(fs.readFileSync(`${clusters[name].pgdata}/postmaster.pid`, 'utf8').split('\n')[0]);
  const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
    .split(/\s+/).filter(Boolean).map(Number);
  return [pid, ...children];
}

const frozen = new Set();
function thaw() {
  for (const pid of frozen) {
    try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
  }
  frozen.clear();
}
process.on('exit', thaw);

// All processes of the cluster stopped: the socket accepts bytes, nothing answers.
function freeze(name) {
  for (const pid of processes(name)) {
    process.kill(pid, 'SIGSTOP');
    frozen.add(pid);
  }
}

// The warnings a limiter logs: their messages, and their fields.
function logger() {
  const lines = [];
  const fields = [];
  return {
    lines, fields, warn: (f, m) => {
      fields.push(f);
      lines.push(m);
    },
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The clocks the client reads (performance.now for its intervals, hrtime for
// its buckets), running as before plus what advance(ms) adds, until the end
// of test t: an interval passes when the test says so, never because the
// machine is slow.
function clock(t) {
  let offsetMs = 0;
  const now = performance.now.bind(performance);
  const hrtime = process.hrtime.bigint;
  t.mock.method(performance, 'now', () => now() + offsetMs);
  t.mock.method(process.hrtime, 'bigint', () => hrtime() + BigInt(Math.round(offsetMs * 1e6)));
  return { advance: (ms) => { offsetMs += ms; } };
}

// The time a promise takes, in ms, and its value.
async function timed(promise) {
  const t0 = performance.now();
  const value = await promise;
  return { ms: performance.now() - t0, value };
}

let unique = 0;
const name = (prefix) => `${prefix}_${process.pid}_${++unique}`;

module.exports = { clusters, skip, stores, needsExtension, connection, sql, stop, start, freeze, thaw, logger, sleep, clock, timed, name };
