"""The GCRA decision arithmetic of include/gcra.h, in integer microseconds.

A port line by line, proved identical by test/vectors/gcra.json: the server,
the C client and this client decide alike.  Python ints are exact, so the
128-bit intermediates of the limit-change rule need no special care; the
int64 overflow checks of gcra_limit_init are made explicitly.

A bucket is None (no row) or (tat_us, interval_us, lock_until_us, lock_us),
the lock fields 0 when the key was never locked.
"""

import math

MAX_RATE = 1000000.0
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

OK = "ok"
BAD_RATE = "bad_rate"
BAD_BURST = "bad_burst"
BAD_COST = "bad_cost"
TOLERANCE_TOO_LARGE = "tolerance_too_large"
BAD_LOCKOUT = "bad_lockout"

# The longest lockout, and the largest growth, a policy may ask for.
MAX_LOCKOUT_US = 366 * 86400 * 1000000
MIN_LOCKOUT_US = 1000000
MAX_LOCKOUT_GROWTH = 100.0

MESSAGES = {
    BAD_RATE: "rate must be a finite number of requests per second above 0 and at most 1000000",
    BAD_BURST: "burst must be at least 1",
    BAD_COST: "cost must not be negative",
    TOLERANCE_TOO_LARGE: "burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range",
    BAD_LOCKOUT: "lockout must be 1 second to 366 days, lockout_growth 1 to 100, and lockout_max from lockout to 366 days",
}

MAX_REQUESTS = 16


class Limit:
    """A limit as the arithmetic sees it: emission interval T and tolerance tau,
    and the lockout of a policy that has one (lockout_us = 0: none)."""

    __slots__ = ("interval_us", "tolerance_us", "burst", "lockout_us", "lockout_max_us", "lockout_growth")

    def __init__(self, interval_us, tolerance_us, burst):
        self.interval_us = interval_us
        self.tolerance_us = tolerance_us
        self.burst = burst
        self.lockout_us = 0         # the first lockout's length; 0: none
        self.lockout_max_us = 0     # the longest one
        self.lockout_growth = 1.0   # each repeat offence's factor


def _round_half_away(x):
    """C's round() for a finite positive double."""
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def limit_init(rate, burst, now_us, max_time_us):
    """(error, Limit): the limit of (rate, burst), checked as gcra_limit_init."""
    if not math.isfinite(rate) or rate <= 0.0 or rate > MAX_RATE:
        return BAD_RATE, None
    if burst < 1:
        return BAD_BURST, None
    interval = _round_half_away(1e6 / rate)
    if interval < 1:
        interval = 1
    if interval >= 4611686018427387904:  # 2^62
        return TOLERANCE_TOO_LARGE, None
    tolerance = interval * burst
    if tolerance > INT64_MAX or 2 * tolerance > INT64_MAX:
        return TOLERANCE_TOO_LARGE, None
    horizon = now_us + 2 * tolerance
    if horizon > INT64_MAX or horizon > max_time_us:
        return TOLERANCE_TOO_LARGE, None
    return OK, Limit(interval, tolerance, burst)


def lockout_init(limit, lockout_us, growth, max_us, now_us, max_time_us):
    """Give limit a lockout of lockout_us, growing by growth up to max_us (0:
    lockout_us), as gcra_lockout_init: now + 2 * max_us must stay inside the
    time range, so that a lockout's end and its forgiveness fit."""
    if max_us == 0:
        max_us = lockout_us
    if (lockout_us < MIN_LOCKOUT_US or lockout_us > MAX_LOCKOUT_US
            or max_us < lockout_us or max_us > MAX_LOCKOUT_US
            or not (growth >= 1.0 and growth <= MAX_LOCKOUT_GROWTH)):
        return BAD_LOCKOUT
    if now_us > max_time_us - 2 * max_us:
        return TOLERANCE_TOO_LARGE
    limit.lockout_us = lockout_us
    limit.lockout_max_us = max_us
    limit.lockout_growth = growth
    return OK


def lockout_length(limit, bucket, now_us):
    """The length of a lockout that starts at now: the last one's times growth
    (one IEEE double multiplication, then floor), between lockout and
    lockout_max, when the key offends again no longer after its last lockout
    ended than that lockout lasted; else the first length."""
    if not (bucket is not None and bucket[2] <= now_us and now_us - bucket[2] < bucket[3]):
        return limit.lockout_us
    grown = math.floor(float(bucket[3]) * limit.lockout_growth)
    if grown < limit.lockout_us:
        grown = limit.lockout_us
    return limit.lockout_max_us if grown > limit.lockout_max_us else grown


def bucket_forgotten(bucket, now_us):
    """Whether bucket is the same as an absent one at now, so that it may be
    deleted: its tat has passed, and so has the time during which a new
    offence would lengthen its last lockout."""
    return bucket is None or (bucket[0] <= now_us and bucket[2] + bucket[3] <= now_us)


class Decision:
    """gcra.h's GcraDecision."""

    __slots__ = ("allowed", "store", "normalised", "locked", "lock_started", "new_tat_us",
                 "new_lock_until_us", "new_lock_us", "remaining", "retry_known", "retry_after_us",
                 "reset_after_us")

    def __init__(self):
        # GcraDecision d = {0}
        self.allowed = self.store = self.normalised = self.locked = self.lock_started = False
        self.retry_known = False
        self.new_tat_us = self.new_lock_until_us = self.new_lock_us = 0
        self.remaining = self.retry_after_us = self.reset_after_us = 0

    def report(self, limit, now_us, tat_after):
        remaining = (now_us + limit.tolerance_us - tat_after) // limit.interval_us
        self.new_tat_us = tat_after
        self.remaining = 0 if remaining < 0 else limit.burst if remaining > limit.burst else remaining
        self.reset_after_us = tat_after - now_us if tat_after > now_us else 0

    def report_locked(self, now_us, tat_used, lock_until):
        """The answer of a locked key: nothing left until the lock ends, and
        full again once both the lock and the tat have passed."""
        self.locked = True
        self.new_tat_us = tat_used
        self.remaining = 0
        self.reset_after_us = (tat_used if tat_used > lock_until else lock_until) - now_us


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def decide(limit, bucket, now_us, cost):
    """Decide cost at now_us against bucket, None or (tat_us, interval_us,
    lock_until_us, lock_us).

    Under a limit with a lockout, a key locked at now is denied (a peek
    allowed) without spending or storing anything, not even the normalised
    debt; a denial of a request the burst can hold starts a lockout, stored
    with the bucket.  Without one, a stored lock is kept and ignored.
    """
    d = Decision()
    T = limit.interval_us
    tau = limit.tolerance_us
    debt = 0
    normalised = False
    if bucket is not None and bucket[0] >= now_us:
        stored_debt = bucket[0] - now_us
        rescaled = _trunc_div(stored_debt * T, bucket[1])
        debt = tau if rescaled > tau else rescaled
        normalised = debt != stored_debt or bucket[1] != T
    tat_used = now_us + debt
    d.new_lock_until_us = bucket[2] if bucket is not None else 0
    d.new_lock_us = bucket[3] if bucket is not None else 0
    if limit.lockout_us > 0 and bucket is not None and now_us < bucket[2]:
        d.allowed = cost == 0
        d.retry_known = True
        d.retry_after_us = 0 if cost == 0 else bucket[2] - now_us
        d.report_locked(now_us, tat_used, bucket[2])
        return d
    if cost == 0:
        d.allowed = True
        d.retry_known = True
        tat_after = tat_used
    elif cost > limit.burst:
        d.allowed = False
        d.retry_known = False
        tat_after = tat_used
    else:
        new_tat = tat_used + cost * T
        d.allowed = new_tat - now_us <= tau
        d.retry_known = True
        if not d.allowed:
            d.retry_after_us = new_tat - now_us - tau
        tat_after = new_tat if d.allowed else tat_used
    d.normalised = normalised
    d.store = cost > 0 and (d.allowed or normalised)
    if not d.allowed and d.retry_known and limit.lockout_us > 0:
        length = lockout_length(limit, bucket, now_us)
        d.lock_started = True
        d.store = True
        d.new_lock_until_us = now_us + length
        d.new_lock_us = length
        d.retry_after_us = length
        d.report_locked(now_us, tat_used, d.new_lock_until_us)
        return d
    d.report(limit, now_us, tat_after)
    return d


class Request:
    """One request of a decision over several buckets (GcraRequest)."""

    __slots__ = ("limit", "bucket", "cost", "shadow")

    def __init__(self, limit, bucket, cost, shadow=False):
        self.limit = limit
        self.bucket = bucket
        self.cost = cost
        self.shadow = shadow


class Combined:
    """gcra.h's GcraCombined."""

    __slots__ = ("allowed", "remaining", "retry_known", "retry_after_us",
                 "reset_after_us", "binding")


def combine(decisions, shadow):
    c = Combined()
    c.allowed = True
    c.retry_known = True
    c.retry_after_us = 0
    c.binding = 0
    c.remaining = decisions[0].remaining
    c.reset_after_us = decisions[0].reset_after_us
    for i, d in enumerate(decisions):
        if d.remaining < c.remaining:
            c.remaining = d.remaining
        if d.reset_after_us > c.reset_after_us:
            c.reset_after_us = d.reset_after_us
        if not d.allowed and not shadow[i]:
            if c.allowed:
                binds = True
            elif not c.retry_known:
                binds = False
            else:
                binds = not d.retry_known or d.retry_after_us > c.retry_after_us
            c.allowed = False
            if binds:
                c.binding = i
                c.retry_known = d.retry_known
                c.retry_after_us = d.retry_after_us if d.retry_known else 0
    if c.allowed:
        c.binding = next(i for i, d in enumerate(decisions) if d.remaining == c.remaining)
    return c


def decide_all(requests, now_us):
    """(Combined, [Decision]): all or nothing over 1 to 16 requests."""
    decisions = [decide(r.limit, r.bucket, now_us, r.cost) for r in requests]
    shadow = [r.shadow for r in requests]
    if any(not d.allowed and not s for d, s in zip(decisions, shadow)):
        for d, r in zip(decisions, requests):
            if not d.allowed or r.cost == 0:
                continue
            # not spent: back to the bucket as normalised
            d.store = d.normalised
            d.report(r.limit, now_us, d.new_tat_us - r.cost * r.limit.interval_us)
    return combine(decisions, shadow), decisions
