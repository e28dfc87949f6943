'use strict';
// The shared client-address vectors (test/vectors/client_ip.tsv, which the
// server's pgTAP suite replays too), every one, through lib/client_ip.js.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { clientIp, clientIpForwarded, ipKey } = require('..');

const lines = fs.readFileSync(path.join(__dirname, '../../../test/vectors/client_ip.tsv'), 'utf8')
  .split('\n').filter((l) => l !== '');
// COPY text format: \N is NULL, backslash escapes as COPY writes them
const copyEscapes = { t: '\t', n: '\n', r: '\r', b: '\b', f: '\f', v: '\v', '\\': '\\' };
const nul = (v) => (v === '\\N' ? null : v.replace(/\\(.)/g, (m, c) => copyEscapes[c] ?? c));
const array = (v) => (v === '\\N' ? null : v.slice(1, -1).split(',').filter((e) => e !== '').map((e) => (e === 'NULL' ? null : e)));

test('client address: every vector of test/vectors/client_ip.tsv', () => {
  assert.ok(lines.length > 100);
  for (const line of lines) {
    const [fn, remote, header, trusted, expected, description] = line.split('\t');
    const walk = fn === 'rl_client_ip' ? clientIp : clientIpForwarded;
    const run = () => walk(nul(remote), nul(header), array(trusted));
    if (expected.startsWith('ERROR ')) {
      assert.throws(run, (err) => err.code === expected.slice(6), description);
    } else {
      assert.equal(run(), nul(expected), description);
    }
  }
});

test('client address: rl_ip_key groups IPv6 by its prefix', () => {
  assert.equal(ipKey('203.0.113.7'), '203.0.113.7');
  assert.equal(ipKey('::ffff:203.0.113.7'), '203.0.113.7');
  assert.equal(ipKey('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::/64');
  assert.equal(ipKey('2001:db8:1:2:3:4:5:6', 48), '2001:db8:1::/48');
  assert.throws(() => ipKey('2001:db8::1', 0), { code: '22023' });
});
