'use strict';
// The shared vectors of include/gcra.h (test/vectors/gcra.json), all of them,
// replayed exactly by lib/gcra.js.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const gcra = require('../lib/gcra');

const vectors = JSON.parse(fs.readFileSync(path.join(__dirname, '../../../test/vectors/gcra.json'), 'utf8'));
const maxTime = BigInt(vectors.max_time_us);

const rate = (text) => Number(text);  // "NaN", "Infinity" and 17-digit decimals parse exactly
const bucket = (b) => ({ present: b.present, tatUs: BigInt(b.tat_us), intervalUs: BigInt(b.interval_us) });
const decisionText = (d) => ({
  allowed: d.allowed, store: d.store, normalised: d.normalised, new_tat_us: String(d.newTatUs),
  remaining: d.remaining, retry_known: d.retryKnown, retry_after_us: String(d.retryAfterUs),
  reset_after_us: String(d.resetAfterUs),
});
function limitOf(r, now) {
  const { limit, error } = gcra.limitInit(rate(r.rate), r.burst, now, maxTime);
  assert.equal(error, undefined, `the limit ${r.rate}/${r.burst} is valid`);
  return limit;
}

test('gcra: every limit of the vectors (gcra_limit_init)', () => {
  assert.ok(vectors.limits.length > 0);
  for (const v of vectors.limits) {
    const { limit, error } = gcra.limitInit(rate(v.rate), v.burst, BigInt(v.now_us), maxTime);
    assert.equal(error ?? 'ok', v.error, `rate ${v.rate} burst ${v.burst}`);
    if (v.error === 'ok') {
      assert.equal(String(limit.intervalUs), v.interval_us);
      assert.equal(String(limit.toleranceUs), v.tolerance_us);
    }
  }
});

test('gcra: every step of every sequence (gcra_decide)', () => {
  let steps = 0;
  for (const s of vectors.sequences) {
    s.steps.forEach((step, i) => {
      const now = BigInt(step.now_us);
      const d = gcra.decide(limitOf(step, now), bucket(step.bucket), now, step.cost);
      assert.deepEqual(decisionText(d), step.expect, `${s.name}, step ${i + 1}`);
      steps++;
    });
  }
  assert.ok(steps > 0);
});

test('gcra: every multi-limit case (gcra_decide_all)', () => {
  assert.ok(vectors.take_all.length > 0);
  for (const c of vectors.take_all) {
    const now = BigInt(c.now_us);
    const { combined, decisions } = gcra.decideAll(c.requests.map((r) => ({
      limit: limitOf(r, now), bucket: bucket(r.bucket), cost: r.cost, shadow: r.shadow,
    })), now);
    c.requests.forEach((r, i) => assert.deepEqual(decisionText(decisions[i]), r.expect, `${c.name}, request ${i + 1}`));
    assert.deepEqual({
      allowed: combined.allowed, remaining: combined.remaining, retry_known: combined.retryKnown,
      retry_after_us: String(combined.retryAfterUs), reset_after_us: String(combined.resetAfterUs),
      binding: combined.binding,
    }, c.expect, c.name);
  }
});
