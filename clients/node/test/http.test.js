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

