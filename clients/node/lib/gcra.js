'use strict';
// The GCRA decision arithmetic of include/gcra.h, in integer microseconds
// (BigInt), so that this client decides exactly as the server's rl_take and
// the C client do; test/vectors/gcra.json proves it.  Times are BigInt
// microseconds on an epoch chosen by the caller; a bucket is
// { present, tatUs, intervalUs, lockUntilUs, lockUs } (the lock fields 0n
// when the key was never locked), a limit { intervalUs, toleranceUs, burst,
// lockoutUs, lockoutMaxUs, lockoutGrowth } (lockoutUs 0n: no lockout).

const MAX_RATE = 1000000;
// the last microsecond a timestamptz can hold, on PostgreSQL's epoch
const PG_MAX_TIME_US = 9223371331200000000n - 1n;
const INT64_MAX = (1n << 63n) - 1n;
// the longest lockout, and the largest growth, a policy may ask for
const MAX_LOCKOUT_US = 366n * 86400n * 1000000n;
const MIN_LOCKOUT_US = 1000000n;
const MAX_LOCKOUT_GROWTH = 100;

const ERRORS = {
  bad_rate: 'rate must be a finite number of requests per second above 0 and at most 1000000',
  bad_burst: 'burst must be at least 1',
  bad_cost: 'cost must not be negative',
  tolerance_too_large:
    'burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range',
  bad_lockout:
    'lockout must be 1 second to 366 days, lockout_growth 1 to 100, and lockout_max from lockout to 366 days',
};

// gcra_limit_init: { limit } or { error } (a key of ERRORS).
function limitInit(rate, burst, nowUs, maxTimeUs) {
  if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0 || rate > MAX_RATE) {
    return { error: 'bad_rate' };
  }
  if (burst < 1) return { error: 'bad_burst' };
  // C's round() halves away from zero; the quotient is positive here
  let interval = Math.round(1e6 / rate);
  if (interval < 1) interval = 1;
  if (interval >= 4611686018427387904) return { error: 'tolerance_too_large' };
  const intervalUs = BigInt(interval);
  const toleranceUs = intervalUs * BigInt(burst);
  const horizon = nowUs + 2n * toleranceUs;
  if (toleranceUs > INT64_MAX || 2n * toleranceUs > INT64_MAX || horizon > INT64_MAX || horizon > maxTimeUs) {
    return { error: 'tolerance_too_large' };
  }
  return { limit: { intervalUs, toleranceUs, burst, lockoutUs: 0n, lockoutMaxUs: 0n, lockoutGrowth: 1 } };
}

// gcra_lockout_init: { limit } (a copy of limit with a lockout of lockoutUs,
// growing by growth up to maxUs; maxUs 0n: lockoutUs) or { error }.
// now + 2 * maxUs must stay inside the time range, so that a lockout's end
// and its forgiveness fit.
function lockoutInit(limit, lockoutUs, growth, maxUs, nowUs, maxTimeUs) {
  if (maxUs === 0n) maxUs = lockoutUs;
  // !(>= && <=) refuses NaN as C's does
  if (lockoutUs < MIN_LOCKOUT_US || lockoutUs > MAX_LOCKOUT_US ||
      maxUs < lockoutUs || maxUs > MAX_LOCKOUT_US ||
      typeof growth !== 'number' || !(growth >= 1 && growth <= MAX_LOCKOUT_GROWTH)) {
    return { error: 'bad_lockout' };
  }
  if (nowUs > maxTimeUs - 2n * maxUs) return { error: 'tolerance_too_large' };
  return { limit: { ...limit, lockoutUs, lockoutMaxUs: maxUs, lockoutGrowth: growth } };
}

// gcra_lockout_length: the length of a lockout that starts at nowUs: the
// last one's times growth, between lockout and lockout_max, when the key
// offends again no longer after its last lockout ended than that lockout
// lasted; else the first length.
function lockoutLength(limit, bucket, nowUs) {
  if (!(bucket.present && bucket.lockUntilUs <= nowUs &&
        nowUs - bucket.lockUntilUs < bucket.lockUs)) {
    return limit.lockoutUs;
  }
  // one IEEE double product then floor, as gcra.h: Number(lockUs) is the
  // C cast to double (exact below 2^53)
  let grown = BigInt(Math.floor(Number(bucket.lockUs) * limit.lockoutGrowth));
  if (grown < limit.lockoutUs) grown = limit.lockoutUs;
  return grown > limit.lockoutMaxUs ? limit.lockoutMaxUs : grown;
}

// gcra_bucket_forgotten: whether bucket is the same as an absent one at
// nowUs (so it may be deleted): its tat has passed, and so has the time
// during which a new offence would lengthen its last lockout.
function bucketForgotten(bucket, nowUs) {
  return !bucket.present ||
    (bucket.tatUs <= nowUs && bucket.lockUntilUs + bucket.lockUs <= nowUs);
}

// BigInt division truncates toward zero, as C's does; this floors.
function floorDiv(a, b) {
  const q = a / b;
  return a % b !== 0n && (a < 0n) !== (b < 0n) ? q - 1n : q;
}

function report(d, limit, nowUs, tatAfter) {
  const remaining = floorDiv(nowUs + limit.toleranceUs - tatAfter, limit.intervalUs);
  d.newTatUs = tatAfter;
  d.remaining = remaining < 0n ? 0 : remaining > BigInt(limit.burst) ? limit.burst : Number(remaining);
  d.resetAfterUs = tatAfter > nowUs ? tatAfter - nowUs : 0n;
}

// A locked key's answer: nothing left until the lock ends, and full again
// once both the lock and the tat have passed.
function reportLocked(d, nowUs, tatUsed, lockUntil) {
  d.locked = true;
  d.newTatUs = tatUsed;
  d.remaining = 0;
  d.resetAfterUs = (tatUsed > lockUntil ? tatUsed : lockUntil) - nowUs;
}

// gcra_decide: a request of cost (a Number) at nowUs against bucket.  Under
// a limit with a lockout, a key locked at nowUs is denied (a peek allowed)
// without spending or storing anything, not even the normalised debt; a
// denial of a request the burst can hold starts a lockout, stored with the
// bucket.  Without one, a stored lock is kept and ignored.
function decide(limit, bucket, nowUs, cost) {
  const T = limit.intervalUs;
  const tau = limit.toleranceUs;
  const live = bucket.present && bucket.tatUs >= nowUs;
  let debt = 0n;
  let normalised = false;
  if (live) {
    // BigInt has no width: the rescale is exact, capped before use
    const storedDebt = bucket.tatUs - nowUs;
    const rescaled = (storedDebt * T) / bucket.intervalUs;
    debt = rescaled > tau ? tau : rescaled;
    normalised = debt !== storedDebt || bucket.intervalUs !== T;
  }
  const tatUsed = nowUs + debt;
  const d = {
    allowed: false, store: false, normalised: false, locked: false, lockStarted: false,
    newTatUs: 0n, newLockUntilUs: bucket.present ? bucket.lockUntilUs : 0n,
    newLockUs: bucket.present ? bucket.lockUs : 0n, remaining: 0,
    retryKnown: true, retryAfterUs: 0n, resetAfterUs: 0n,
  };
  if (limit.lockoutUs > 0n && bucket.present && nowUs < bucket.lockUntilUs) {
    // locked: not normalised, not stored
    d.allowed = cost === 0;
    d.retryAfterUs = cost === 0 ? 0n : bucket.lockUntilUs - nowUs;
    reportLocked(d, nowUs, tatUsed, bucket.lockUntilUs);
    return d;
  }
  let tatAfter;
  if (cost === 0) {
    d.allowed = true;
    tatAfter = tatUsed;
  } else if (cost > limit.burst) {
    d.retryKnown = false;
    tatAfter = tatUsed;
  } else {
    const newTat = tatUsed + BigInt(cost) * T;
    d.allowed = newTat - nowUs <= tau;
    if (!d.allowed) d.retryAfterUs = newTat - nowUs - tau;
    tatAfter = d.allowed ? newTat : tatUsed;
  }
  d.normalised = normalised;
  d.store = cost > 0 && (d.allowed || normalised);
  if (!d.allowed && d.retryKnown && limit.lockoutUs > 0n) {
    // written although denied, with any normalisation
    const length = lockoutLength(limit, bucket, nowUs);
    d.lockStarted = true;
    d.store = true;
    d.newLockUntilUs = nowUs + length;
    d.newLockUs = length;
    d.retryAfterUs = length;
    reportLocked(d, nowUs, tatUsed, d.newLockUntilUs);
    return d;
  }
  report(d, limit, nowUs, tatAfter);
  return d;
}

// gcra_combine over decisions; shadow[i] true: its denial denies nothing.
function combine(ds, shadow) {
  const c = {
    allowed: true, remaining: ds[0].remaining, retryKnown: true,
    retryAfterUs: 0n, resetAfterUs: ds[0].resetAfterUs, binding: 0,
  };
  for (let i = 0; i < ds.length; i++) {
    const d = ds[i];
    if (d.remaining < c.remaining) c.remaining = d.remaining;
    if (d.resetAfterUs > c.resetAfterUs) c.resetAfterUs = d.resetAfterUs;
    if (!d.allowed && !shadow[i]) {
      let binds;
      if (c.allowed) binds = true;
      else if (!c.retryKnown) binds = false;
      else binds = !d.retryKnown || d.retryAfterUs > c.retryAfterUs;
      c.allowed = false;
      if (binds) {
        c.binding = i;
        c.retryKnown = d.retryKnown;
        c.retryAfterUs = d.retryKnown ? d.retryAfterUs : 0n;
      }
    }
  }
  if (c.allowed) c.binding = ds.findIndex((d) => d.remaining === c.remaining);
  return c;
}

// gcra_decide_all: requests [{ limit, bucket, cost, shadow }], all or
// nothing; returns { combined, decisions }.
function decideAll(requests, nowUs) {
  const decisions = requests.map((r) => decide(r.limit, r.bucket, nowUs, r.cost));
  const shadow = requests.map((r) => Boolean(r.shadow));
  const allowed = decisions.every((d, i) => d.allowed || shadow[i]);
  if (!allowed) {
    decisions.forEach((d, i) => {
      const r = requests[i];
      if (!d.allowed || r.cost === 0) return;
      // not spent: back to the bucket as normalised
      d.store = d.normalised;
      report(d, r.limit, nowUs, d.newTatUs - BigInt(r.cost) * r.limit.intervalUs);
    });
  }
  return { combined: combine(decisions, shadow), decisions };
}

module.exports = {
  MAX_RATE, PG_MAX_TIME_US, MAX_LOCKOUT_US, MIN_LOCKOUT_US, MAX_LOCKOUT_GROWTH, ERRORS,
  limitInit, lockoutInit, lockoutLength, bucketForgotten, decide, decideAll,
};
