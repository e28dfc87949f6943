"""What the Flask decorator and the ASGI middleware share: which calls a
request makes, and the fields of its answer."""

from . import _core, _rate, http


def plan(limits, rate, burst):
    """(limits, rate, burst) of an integration's arguments: limits one limiter name or a
    dict of name to key function, rate and burst as rl_take's (rate may be "5/minute" or a Rate)."""
    if isinstance(limits, str):
        limits = {limits: None}
    if not limits:
        raise ValueError("limits must name at least one limiter")
    rate, burst = _rate.resolve(rate, burst)
    if (rate is None) != (burst is None):
        raise ValueError("rate and burst go together")
    return dict(limits), rate, burst


def decide(limiter, limits, keys, rate, burst, cost):
    """The decision of a request: one take, or a take_all over several limits."""
    if len(limits) == 1:
        return limiter.take(next(iter(limits)), keys[0], rate=rate, burst=burst, cost=cost)
    return limiter.take_all([_core.Request(name, key, rate, burst, cost) for name, key in zip(limits, keys)])


def fields(limiter, decision, rate, burst):
    """The RateLimit fields of a decision, by the binding limiter's limit (when known)."""
    if rate is None:
        policy = limiter.policy(decision.limiter)
        if policy is None:
            return {}
        rate, burst = policy[0], policy[1]
    try:
        return http.headers(decision, decision.limiter, rate, burst)
    except _core.RateLimitError:
        # a limiter name HTTP cannot carry: the status code alone
        return {}
