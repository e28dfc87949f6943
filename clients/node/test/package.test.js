'use strict';
// The package as an application meets it: the error of bad use by its name
// (the 1.2 name an alias) with the server's error as its cause; a process
// that never calls end() exits, and idle connections close after
// idleTimeoutMs; the ES module entry; the README's install line and
// programs, run as printed in an application's own folder, where pg is the
// peer the application has.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFile, spawn } = require('node:child_process');
const { promisify } = require('node:util');
const client = require('..');
const h = require('./helpers');

const { RateLimiter, RateLimitUsageError, RateLimitError } = client;
const run = promisify(execFile);
const dir = path.join(__dirname, '..');

// node with args in folder cwd: its exit code, output and time
function node(args, cwd, env = {}, timeoutMs = 20000) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b) => { out += b; });
    child.stderr.on('data', (b) => { out += b; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, ms: performance.now() - t0 });
    });
  });
}

const url = (name, database) => {
  const c = h.connection(name, database);
  return `postgres://${encodeURIComponent(c.user)}@/${database}?host=${encodeURIComponent(c.host)}&port=${c.port}`;
};

test('errors: RateLimitUsageError, RateLimitError its 1.2 alias; a refusal of the server is its cause', { skip: h.skip }, async () => {
  assert.equal(RateLimitError, RateLimitUsageError, 'one class under two names');
  const rl = new RateLimiter({ connection: h.connection('table'), deadlineMs: 10000 });
  try {
    const unknown = h.name('unknown');
    const err = await rl.take(unknown, 'k').then(() => null, (e) => e);
    assert.ok(err instanceof RateLimitUsageError && err instanceof RateLimitError);
    assert.equal(err.name, 'RateLimitUsageError');
    assert.equal(err.code, '42704');
    assert.ok(err.cause instanceof Error, 'the server\'s error is the cause');
    assert.equal(err.cause.code, '42704');
    assert.equal(err.cause.message, err.message);
    assert.equal(err.cause.severity, 'ERROR', 'pg\'s DatabaseError, with its fields');
    const local = await rl.take('', 'k', { limit: 1, windowMs: 1000 }).then(() => null, (e) => e);
    assert.deepEqual([local.name, local.code, local.cause], ['RateLimitUsageError', '22023', undefined], 'a check in the client has no cause');
  } finally {
    await rl.end();
  }
});

test('lifetime: a program that never calls end() exits at once; idle connections close after idleTimeoutMs', { skip: h.skip }, async () => {
  // an idle timeout far past the time the program may take: only unref'd
  // connections let it exit before it is killed at 30 s
  const program = `import { RateLimiter } from 'ratelimit-client';
    const rl = new RateLimiter({ connection: JSON.parse(process.env.CONNECTION), idleTimeoutMs: 600000 });
    const d = await rl.take('lifetime', 'k', { limit: 5, windowMs: '1 m' });
    console.log(d.source);`;
  const r = await node(['--input-type=module', '-e', program], dir, { CONNECTION: JSON.stringify(h.connection('table')) }, 30000);
  assert.deepEqual([r.signal, r.code, r.out.trim()], [null, 0, 'database'], `${r.out} (after ${Math.round(r.ms)} ms)`);

  const app = h.name('idle');
  const sessions = async () => (await h.sql('table', 'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]))[0].n;
  const rl = new RateLimiter({ connection: { ...h.connection('table'), application_name: app }, idleTimeoutMs: 300, poolSize: 2 });
  try {
    await Promise.all([rl.take('idle', 'a', { limit: 9, windowMs: 1000 }), rl.take('idle', 'b', { limit: 9, windowMs: 1000 })]);
    assert.equal(await sessions(), 2, 'two connections, idle');
    // used again within the timeout: it starts again from the last use
    await h.sleep(200);
    await rl.take('idle', 'a', { limit: 9, windowMs: 1000 });
    const until = performance.now() + 5000;
    while (await sessions() > 0 && performance.now() < until) await h.sleep(50);
    assert.equal(await sessions(), 0, 'closed after idleTimeoutMs');
    assert.equal((await rl.take('idle', 'a', { limit: 9, windowMs: 1000 })).source, 'database', 'a closed connection is opened again');
  } finally {
    await rl.end();
  }
  assert.throws(() => new RateLimiter({ idleTimeoutMs: 0 }), RangeError);
});

test('ES modules: import names the exports of require, the same objects, from lib/index.mjs; their types under nodenext', async () => {
  const esm = await import('ratelimit-client');
  assert.deepEqual(Object.keys(esm).filter((k) => k !== 'default').sort(), Object.keys(client).sort());
  for (const k of Object.keys(client)) assert.equal(esm[k], client[k], k);
  assert.equal(esm.default, client);
  const r = await node(['--input-type=module', '-e', "console.log(import.meta.resolve('ratelimit-client'))"], dir);
  assert.match(r.out.trim(), /\/lib\/index\.mjs$/);
  // and the types, for a TypeScript ES module (nodenext)
  const tsc = await node([path.join(dir, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', 'test/types/esm'], dir);
  assert.deepEqual([tsc.code, tsc.out], [0, ''], 'tsc checks test/types/esm/usage.mts');
});

test('README: the install line in an application\'s folder brings pg as a peer; the first program and the Express example run as printed', { skip: h.skip }, async () => {
  const readme = fs.readFileSync(path.join(dir, 'README.md'), 'utf8');
  const [, install] = /^```sh\n(npm install [^\n]*)\n```$/m.exec(readme);
  const programs = Object.fromEntries([...readme.matchAll(/^```js\n(\/\/ (\S+): [^\n]*\n.*?)^```$/gms)].map((m) => [m[2], m[1]]));
  assert.deepEqual(Object.keys(programs), ['first.mjs', 'server.js']);

  const app = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-app-'));
  try {
    fs.writeFileSync(path.join(app, 'package.json'), '{ "name": "app", "private": true }\n');
    const argv = install.replace('/path/to/ratelimit/clients/node', dir).split(' ');
    await run(argv[0], [...argv.slice(1), '--no-audit', '--no-fund', '--loglevel=error'], { cwd: app });
    const installed = JSON.parse(fs.readFileSync(path.join(app, 'node_modules/ratelimit-client/package.json'), 'utf8'));
    assert.deepEqual([installed.dependencies, installed.peerDependencies], [undefined, { pg: '^8.16.0' }]);
    assert.ok(fs.existsSync(path.join(app, 'node_modules/pg/package.json')), 'npm installed the peer pg for the application');
    assert.ok(!fs.existsSync(path.join(app, 'node_modules/ratelimit-client/node_modules/pg')), 'no copy of pg of its own');
    assert.ok(fs.existsSync(path.join(app, 'node_modules/ratelimit-client/README.md')), 'the package carries its README');
    for (const [file, text] of Object.entries(programs)) fs.writeFileSync(path.join(app, file), text);

    const db = h.name('readme');
    await h.sql('table', `CREATE DATABASE ${db}`);
    await h.sql('table', 'CREATE EXTENSION ratelimit', [], db);
    const env = { DATABASE_URL: url('table', db) };

    const first = await node(['first.mjs'], app, env);
    assert.equal(first.code, 0, first.out);
    // 12 s: one cell, less the time the program took
    assert.match(first.out, /^allowed, 4 left\nallowed, 3 left\nallowed, 2 left\nallowed, 1 left\nallowed, 0 left\ndenied, retry in 1[012] s\n$/);
    assert.ok(first.ms < 9000, `it exits without end(), before the idle timeout of 10 s: after ${Math.round(first.ms)} ms`);

    const port = await new Promise((resolve) => {
      const s = require('node:net').createServer().listen(0, '127.0.0.1', () => {
        const { port: free } = s.address();
        s.close(() => resolve(free));
      });
    });
    const server = spawn(process.execPath, ['server.js'], { cwd: app, env: { ...process.env, ...env, PORT: String(port) }, stdio: 'ignore' });
    try {
      let answers = [];
      const until = performance.now() + 10000;
      while (answers.length === 0) {
        try {
          answers.push(await fetch(`http://127.0.0.1:${port}/login`, { method: 'POST' }));
        } catch (err) {
          if (performance.now() > until) throw err;
          await h.sleep(100);
        }
      }
      for (let i = 0; i < 5; i++) answers.push(await fetch(`http://127.0.0.1:${port}/login`, { method: 'POST' }));
      assert.deepEqual(answers.map((r) => r.status), [200, 200, 200, 200, 200, 429]);
      assert.deepEqual(await answers[0].json(), { signedIn: true, left: 4 });
      const denied = answers[5];
      assert.deepEqual(await denied.json(), { error: 'Too many requests, try again later' });
      // one cell of each (9 s, 12 s), less the time the requests took
      assert.match(denied.headers.get('retry-after'), /^1[012]$/);
      assert.equal(denied.headers.get('ratelimit-policy'), '"api";q=100;w=900, "login";q=5;w=60');
      assert.match(denied.headers.get('ratelimit'), /^"api";r=94;t=[7-9], "login";r=0;t=1[012]$/);
    } finally {
      server.kill();
    }
  } finally {
    fs.rmSync(app, { recursive: true, force: true });
  }
});
