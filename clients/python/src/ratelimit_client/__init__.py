"""ratelimit_client: the ratelimit extension's decisions for Python, with a
local pre-check, a deadline that holds for a stalled server, and a
per-process fallback at the same limit during an outage.

    from ratelimit_client import Limiter
    limiter = Limiter("postgresql://web@127.0.0.1/app")
    if limiter.take("auth_login", email):      # by the limiter's policy
        ...
    limiter.take("api", user_id, rate="100/hour")   # or Rate.per_hour(100)

AsyncLimiter (ratelimit_client.aio) is the same for asyncio;
ratelimit_client.flask raises HTTP 429 (werkzeug's TooManyRequests),
ratelimit_client.asgi answers it, ratelimit_client.fastapi raises it from a
route's dependency, and ratelimit_client.django has a decorator,
is_ratelimited and a middleware.
"""

from typing import Any

from ._core import (Decision, Policy, RateLimitError, Request, Source, Stats,
                    UnknownLimiterError)
from ._rate import Rate
from .client import Limiter

__all__ = ["Limiter", "AsyncLimiter", "Decision", "Policy", "Rate", "Request", "Source", "Stats",
           "RateLimitError", "UnknownLimiterError"]


def __getattr__(name: str) -> Any:
    # asyncio's limiter without importing asyncio for the threads' one
    if name == "AsyncLimiter":
        from .aio import AsyncLimiter
        return AsyncLimiter
    raise AttributeError(name)
