'use strict';
// The Express middleware: 429 with Retry-After and the RateLimit fields of
// rl_headers, keyed by the client address of the rl_client_ip rules (a
// header from an untrusted peer is ignored).  The sign-in example runs in
// test/t/109_readme_apps.pl.
const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const { RateLimiter, rateLimit } = require('..');
const h = require('./helpers');

async function serve(app) {
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

const post = (url, headers = {}, body) => fetch(url, { method: 'POST', headers, body });

test('middleware: 429 with Retry-After and the RateLimit fields of rl_headers; allowed answers carry the fields too', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table') });
  const limiter = h.name('http');
  const app = express();
  app.post('/login', rateLimit(rl, { limiter, rate: 2 / 60, burst: 2 }), (req, res) => res.send(`ok ${req.rateLimit.remaining}\n`));
  const srv = await serve(app);
  try {
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await post(`${srv.url}/login`));
    assert.deepEqual(answers.map((r) => r.status), [200, 200, 429]);
    assert.equal(answers[0].headers.get('ratelimit-policy'), `"${limiter}";q=2;w=60`);
    assert.equal(answers[0].headers.get('ratelimit'), `"${limiter}";r=1;t=30`);
    assert.equal(answers[0].headers.get('retry-after'), null);
    const denied = answers[2];
    assert.equal(denied.headers.get('ratelimit'), `"${limiter}";r=0;t=30`);
    assert.equal(denied.headers.get('retry-after'), '30');
    assert.equal(await denied.text(), 'Too many requests\n');
    // the same fields the server writes for its own answer
    const [row] = await h.sql('table', 'SELECT rl_headers(d, $1, $3, 2) AS f FROM rl_take($1, $2, $3, 2, 1) AS d',
      [limiter, '127.0.0.1', 2 / 60]);
    assert.equal(row.f['Retry-After'], denied.headers.get('retry-after'));
    assert.equal(row.f['RateLimit-Policy'], denied.headers.get('ratelimit-policy'));
  } finally {
    await srv.close();
    await rl.end();
  }
});

test('middleware: X-Forwarded-For and Forwarded are believed from trusted proxies only', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table') });
  const open = h.name('untrusted');
  const behind = h.name('trusted');
  const rfc = h.name('forwarded');
  const app = express();
  const ok = (req, res) => res.send('ok\n');
  // the peer, 127.0.0.1, is not trusted: every client shares its budget
  app.post('/open', rateLimit(rl, { limiter: open, rate: 1 / 3600, burst: 2 }), ok);
  app.post('/behind', rateLimit(rl, { limiter: behind, rate: 1 / 3600, burst: 2, trustedProxies: ['127.0.0.0/8'] }), ok);
  app.post('/rfc', rateLimit(rl, { limiter: rfc, rate: 1 / 3600, burst: 1, trustedProxies: '127.0.0.1', header: 'forwarded' }), ok);
  const srv = await serve(app);
  try {
    const codes = async (route, header, values) => {
      const out = [];
      for (const v of values) out.push((await post(`${srv.url}${route}`, { [header]: v })).status);
      return out;
    };
    assert.deepEqual(await codes('/open', 'x-forwarded-for', ['203.0.113.1', '203.0.113.2', '203.0.113.3']), [200, 200, 429],
      'a header from an untrusted peer is ignored');
    assert.deepEqual(await codes('/behind', 'x-forwarded-for', ['203.0.113.1', '203.0.113.1', '203.0.113.1', '203.0.113.2', '198.51.100.9, 203.0.113.2']),
      [200, 200, 429, 200, 200], 'the address the trusted proxy saw, its rightmost entry');
    assert.deepEqual(await codes('/behind', 'x-forwarded-for', ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2::3']), [200, 200, 429],
      'IPv6 clients share a budget per /64');
    const [bucket] = await h.sql('table', 'SELECT remaining FROM rl_take($1, $2, $3, 2, 0)', [behind, '2001:db8:1:2::/64', 1 / 3600]);
    assert.equal(bucket.remaining, 0, 'keyed by rl_ip_key');
    assert.deepEqual(await codes('/rfc', 'forwarded', ['for=203.0.113.5', 'for="[2001:db8::5]:80"', 'for=203.0.113.5;proto=https']),
      [200, 200, 429]);
  } finally {
    await srv.close();
    await rl.end();
  }
});

test('middleware: bad use goes to the error handler, never an answer', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table') });
  const app = express();
  app.post('/x', rateLimit(rl, { limiter: h.name('bad'), rate: -1, burst: 2 }), (req, res) => res.send('ok\n'));
  app.use((err, req, res, next) => res.status(500).send(`${err.code}\n`));
  const srv = await serve(app);
  try {
    const r = await post(`${srv.url}/x`);
    assert.deepEqual([r.status, await r.text()], [500, '22023\n']);
  } finally {
    await srv.close();
    await rl.end();
  }
});


test('middleware: message as JSON or text with statusCode, or a handler; the decision under requestPropertyName', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table') });
  const app = express();
  const ok = (req, res) => res.send('ok\n');
  const hour = { limit: 1, windowMs: '1 h' };
  app.post('/json', rateLimit(rl, { limiter: h.name('json'), ...hour, message: { error: 'too many' }, statusCode: 503 }), ok);
  app.post('/text', rateLimit(rl, { limiter: h.name('text'), ...hour, message: 'Slow down\n' }), ok);
  app.post('/fn', rateLimit(rl, {
    limiter: h.name('fn'), ...hour, message: async (req) => ({ retryAfterMs: req.rateLimit.retryAfterMs }),
  }), ok);
  app.post('/handler', rateLimit(rl, {
    limiter: h.name('handler'), ...hour, requestPropertyName: 'limited', statusCode: 420,
    handler: (req, res, next, options) => res.status(options.statusCode)
      .json({ remaining: req.limited.remaining, limit: req.limited.limit, rateLimit: req.rateLimit ?? null }),
  }), (req, res) => res.send(`ok ${req.limited.remaining} ${req.rateLimit === undefined}\n`));
  const srv = await serve(app);
  try {
    const twice = async (route) => [await post(`${srv.url}${route}`), await post(`${srv.url}${route}`)];
    const [, json] = await twice('/json');
    assert.equal(json.status, 503);
    assert.match(json.headers.get('content-type'), /^application\/json/);
    assert.deepEqual(await json.json(), { error: 'too many' });
    assert.match(json.headers.get('ratelimit'), /;r=0;t=(3599|3600)$/, 'the fields as before');
    assert.match(json.headers.get('retry-after'), /^(3599|3600)$/);
    const [, text] = await twice('/text');
    assert.deepEqual([text.status, text.headers.get('content-type'), await text.text()], [429, 'text/plain; charset=utf-8', 'Slow down\n']);
    const [, fn] = await twice('/fn');
    const body = await fn.json();
    assert.equal(fn.status, 429);
    assert.ok(body.retryAfterMs > 3590000 && body.retryAfterMs <= 3600000, `message(req) sees the decision: ${body.retryAfterMs}`);
    const [first, handled] = await twice('/handler');
    assert.equal(await first.text(), 'ok 0 true\n', 'the decision is req.limited, not req.rateLimit');
    assert.equal(handled.status, 420);
    assert.deepEqual(await handled.json(), { remaining: 0, limit: 1, rateLimit: null });
  } finally {
    await srv.close();
    await rl.end();
  }
});

test('middleware: skip(req, res) lets a request through undecided, without fields; bad options are refused at once', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table') });
  const limiter = h.name('skip');
  const app = express();
  app.use(rateLimit(rl, { limiter, limit: 1, windowMs: 3600000, skip: async (req) => req.path === '/health' }));
  app.get('/health', (req, res) => res.send(`healthy ${req.rateLimit === undefined}\n`));
  app.get('/work', (req, res) => res.send('ok\n'));
  const srv = await serve(app);
  try {
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${srv.url}/health`);
      assert.deepEqual([r.status, r.headers.get('ratelimit'), await r.text()], [200, null, 'healthy true\n'], `health check ${i + 1}`);
    }
    const [bucket] = await h.sql('table', 'SELECT remaining FROM rl_take($1, $2, $3, 1, 0)', [limiter, '127.0.0.1', 1 / 3600]);
    assert.equal(bucket.remaining, 1, 'the skipped requests spent nothing');
    assert.deepEqual([(await fetch(`${srv.url}/work`)).status, (await fetch(`${srv.url}/work`)).status], [200, 429]);
  } finally {
    await srv.close();
    await rl.end();
  }
  assert.throws(() => rateLimit(rl, { limiter, statusCode: 42 }), RangeError);
  assert.throws(() => rateLimit(rl, { limiter, skip: true }), TypeError);
  assert.throws(() => rateLimit(rl, { limiter, handler: 'send' }), TypeError);
  assert.throws(() => rateLimit(rl, { limiter, requestPropertyName: '' }), TypeError);
});

test('middleware: a global and a route limiter both report their RateLimit fields; an answer already sent takes none', { skip: h.skip }, async () => {
  const rl = new RateLimiter({ connection: h.connection('table') });
  const global = h.name('global');
  const route = h.name('route');
  const late = h.name('late');
  const errors = [];
  const app = express();
  app.use(rateLimit(rl, { limiter: global, limit: 100, windowMs: '100 s' }));
  app.get('/route', rateLimit(rl, { limiter: route, limit: 2, windowMs: '2 s' }), (req, res) => res.send('ok\n'));
  // a handler that answers, then passes the request on to a limiter
  app.get('/late', (req, res, next) => { res.send('early\n'); next(); },
    rateLimit(rl, { limiter: late, limit: 1, windowMs: '1 h' }), (req, res) => { req.reached = true; });
  app.use((err, req, res, next) => { errors.push(err); next(err); });
  const srv = await serve(app);
  try {
    const r = await fetch(`${srv.url}/route`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('ratelimit-policy'), `"${global}";q=100;w=100, "${route}";q=2;w=2`);
    assert.equal(r.headers.get('ratelimit'), `"${global}";r=99;t=1, "${route}";r=1;t=1`);
    await fetch(`${srv.url}/route`);
    const denied = await fetch(`${srv.url}/route`);
    assert.equal(denied.status, 429);
    assert.equal(denied.headers.get('ratelimit'), `"${global}";r=97;t=1, "${route}";r=0;t=1`);
    assert.equal(denied.headers.get('retry-after'), '1');
    for (let i = 0; i < 2; i++) {
      const early = await fetch(`${srv.url}/late`);
      assert.deepEqual([early.status, await early.text()], [200, 'early\n']);
      assert.equal(early.headers.get('ratelimit'), `"${global}";r=${96 - i};t=1`, 'only the fields written before the answer');
    }
    await h.sleep(100);
    assert.deepEqual(errors, [], 'no error for fields after the answer, allowed or denied');
    const [bucket] = await h.sql('table', 'SELECT remaining FROM rl_take($1, $2, $3, 1, 0)', [late, '127.0.0.1', 1 / 3600]);
    assert.equal(bucket.remaining, 0, 'the late limiter still decided');
  } finally {
    await srv.close();
    await rl.end();
  }
});
