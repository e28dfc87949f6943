"""The GCRA decision arithmetic of include/gcra.h, in integer microseconds.

A port line by line, proved identical by test/vectors/gcra.json: the server,
the C client and this client decide alike.  Python ints are exact, so the
128-bit intermediates of the limit-change rule need no special care; the
int64 overflow checks of gcra_limit_init are made explicitly.
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

MESSAGES = {
    BAD_RATE: "rate must be a finite number of requests per second above 0 and at most 1000000",
    BAD_BURST: "burst must be at least 1",
    BAD_COST: "cost must not be negative",
    TOLERANCE_TOO_LARGE: "burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range",
}

MAX_REQUESTS = 16


class Limit:
    """A limit as the arithmetic sees it: emission interval T and tolerance tau."""

    __slots__ = ("interval_us", "tolerance_us", "burst")

    def __init__(self, interval_us, tolerance_us, burst):
        self.interval_us = interval_us
        self.tolerance_us = tolerance_us
        self.burst = burst


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


class Decision:
    """gcra.h's GcraDecision."""

    __slots__ = ("allowed", "store", "normalised", "new_tat_us", "remaining",
                 "retry_known", "retry_after_us", "reset_after_us")

    def report(self, limit, now_us, tat_after):
        remaining = (now_us + limit.tolerance_us - tat_after) // limit.interval_us
        self.new_tat_us = tat_after
        self.remaining = 0 if remaining < 0 else limit.burst if remaining > limit.burst else remaining
        self.reset_after_us = tat_after - now_us if tat_after > now_us else 0


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def decide(limit, bucket, now_us, cost):
    """Decide cost at now_us against bucket, None or (tat_us, interval_us)."""
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
    d.retry_after_us = 0
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
