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
const bucket = (b) => ({
  present: b.present, tatUs: BigInt(b.tat_us), intervalUs: BigInt(b.interval_us),
  lockUntilUs: BigInt(b.lock_until_us), lockUs: BigInt(b.lock_us),
});
const bucketText = (b) => ({
  present: b.present, tat_us: String(b.tatUs), interval_us: String(b.intervalUs),
  lock_until_us: String(b.lockUntilUs), lock_us: String(b.lockUs),
});
const decisionText = (d) => ({
  allowed: d.allowed, store: d.store, normalised: d.normalised, new_tat_us: String(d.newTatUs),
  remaining: d.remaining, retry_known: d.retryKnown, retry_after_us: String(d.retryAfterUs),
  reset_after_us: String(d.resetAfterUs), locked: d.locked, lock_started: d.lockStarted,
  new_lock_until_us: String(d.newLockUntilUs), new_lock_us: String(d.newLockUs),
});
const lockoutText = (l) => ({
  lockout_us: String(l.lockoutUs), lockout_growth: l.lockoutGrowth, lockout_max_us: String(l.lockoutMaxUs),
});
// the limit of a step or request, with its lockout when lockout_us > 0; the
// vectors print the limit's lockout as gcra.h resolved it (none: 0, 1, 0)
function limitOf(r, now) {
  const what = `the limit ${r.rate}/${r.burst} lockout ${r.lockout_us}`;
  let { limit, error } = gcra.limitInit(rate(r.rate), r.burst, now, maxTime);
  assert.equal(error, undefined, `${what} is valid`);
  if (BigInt(r.lockout_us) > 0n) {
    ({ limit, error } = gcra.lockoutInit(limit, BigInt(r.lockout_us), rate(r.lockout_growth),
      BigInt(r.lockout_max_us), now, maxTime));
    assert.equal(error, undefined, `${what} is valid`);
  }
  assert.deepEqual(lockoutText(limit), {
    lockout_us: r.lockout_us, lockout_growth: rate(r.lockout_growth), lockout_max_us: r.lockout_max_us,
  }, what);
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

test('gcra: every lockout of the vectors (gcra_lockout_init)', () => {
  assert.ok(vectors.lockout_limits.length > 0);
  for (const v of vectors.lockout_limits) {
    const now = BigInt(v.now_us);
    const what = `lockout ${v.lockout_us} growth ${v.lockout_growth} max ${v.lockout_max_us} at ${v.now_us}`;
    // gcra_vectors.c applies it to rate 1, burst 1 at now
    const base = gcra.limitInit(1, 1, now, maxTime);
    assert.equal(base.error, undefined, what);
    const { limit, error } = gcra.lockoutInit(base.limit, BigInt(v.lockout_us), rate(v.lockout_growth),
      BigInt(v.lockout_max_us), now, maxTime);
    assert.equal(error ?? 'ok', v.error, what);
    if (v.error === 'ok') {
      assert.deepEqual(lockoutText(limit), {
        lockout_us: v.lockout_us, lockout_growth: rate(v.lockout_growth), lockout_max_us: v.resolved_max_us,
      }, what);
    }
  }
});

test('gcra: every step of every sequence (gcra_decide)', () => {
  let steps = 0;
  let lockouts = 0;
  for (const s of vectors.sequences) {
    // the bucket before each step is what the steps before it stored
    let stored = { present: false, tatUs: 0n, intervalUs: 0n, lockUntilUs: 0n, lockUs: 0n };
    s.steps.forEach((step, i) => {
      const now = BigInt(step.now_us);
      const limit = limitOf(step, now);
      assert.deepEqual(bucketText(stored), step.bucket, `${s.name}, the bucket before step ${i + 1}`);
      const d = gcra.decide(limit, bucket(step.bucket), now, step.cost);
      assert.deepEqual(decisionText(d), step.expect, `${s.name}, step ${i + 1}`);
      if (d.store) {
        stored = {
          present: true, tatUs: d.newTatUs, intervalUs: limit.intervalUs,
          lockUntilUs: d.newLockUntilUs, lockUs: d.newLockUs,
        };
      }
      if (d.lockStarted) lockouts++;
      steps++;
    });
  }
  assert.ok(steps > 0 && lockouts > 0);
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
