"""ratelimit_client: the ratelimit extension's decisions for Python, with a
local pre-check, a deadline that holds for a stalled server, and a
per-process fallback at the same limit during an outage.

    from ratelimit_client import Limiter
    limiter = Limiter("postgresql://web@127.0.0.1/app")
    if limiter.take("auth_login", email):      # by the limiter's policy
        ...

AsyncLimiter (ratelimit_client.aio) is the same for asyncio;
ratelimit_client.flask and ratelimit_client.asgi answer HTTP 429, and
ratelimit_client.fastapi raises it from a route's dependency.
"""

from ._core import (Decision, Policy, RateLimitError, Request, Source, Stats,
                    UnknownLimiterError)
from .client import Limiter

__all__ = ["Limiter", "AsyncLimiter", "Decision", "Policy", "Request", "Source", "Stats",
           "RateLimitError", "UnknownLimiterError"]


def __getattr__(name):
    # asyncio's limiter without importing asyncio for the threads' one
    if name == "AsyncLimiter":
        from .aio import AsyncLimiter
        return AsyncLimiter
    raise AttributeError(name)
