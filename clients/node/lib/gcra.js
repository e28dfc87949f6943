'use strict';
// The GCRA decision arithmetic of include/gcra.h, in integer microseconds
// (BigInt), so that this client decides exactly as the server's rl_take and
// the C client do; test/vectors/gcra.json proves it.  Times are BigInt
// microseconds on an epoch chosen by the caller; a bucket is
// { present, tatUs, intervalUs }, a limit { intervalUs, toleranceUs, burst }.

const MAX_RATE = 1000000;
// the last microsecond a timestamptz can hold, on PostgreSQL's epoch
const PG_MAX_TIME_US = 9223371331200000000n - 1n;
const INT64_MAX = (1n << 63n) - 1n;

const ERRORS = {
  bad_rate: 'rate must be a finite number of requests per second above 0 and at most 1000000',
  bad_burst: 'burst must be at least 1',
  bad_cost: 'cost must not be negative',
  tolerance_too_large:
    'burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range',
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
  return { limit: { intervalUs, toleranceUs, burst } };
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

// gcra_decide: a request of cost (a Number) at nowUs against bucket.
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
    allowed: false, store: false, normalised, newTatUs: 0n, remaining: 0,
    retryKnown: true, retryAfterUs: 0n, resetAfterUs: 0n,
  };
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
  d.store = cost > 0 && (d.allowed || normalised);
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

module.exports = { MAX_RATE, PG_MAX_TIME_US, ERRORS, limitInit, decide, decideAll };
