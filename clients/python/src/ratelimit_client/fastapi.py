"""A FastAPI dependency (Starlette's Request, Response and HTTPException): the
limits of one route, keyed by its request.

    from fastapi import Depends
    from ratelimit_client.fastapi import RateLimit

    sign_in = RateLimit(limiter, {"sign_in_ip": None, "sign_in_failures": email})   # an AsyncLimiter

    @app.post("/login", dependencies=[Depends(sign_in)])
    async def login(): ...

limits is one limiter name (keyed by the client address) or a dict of
limiter name to a key function of the Request, or None for the client
address; a key function may be async (to read the form body) and may raise
(HTTPException(400) for a missing field).  Several are decided all or
nothing.  Without rate and burst, the limiters' policies decide.  A denial
raises RateLimitExceeded, an HTTPException 429 with Retry-After and the
RateLimit fields; an allowed request's fields go on the route's response.
"""

import inspect
from typing import Awaitable, Callable, Dict, Iterable, Mapping, Optional, Union

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from . import _web, asgi, http
from ._core import Decision
from ._rate import RateLike
from .aio import AsyncLimiter

KeyFunction = Callable[[Request], Union[str, Awaitable[str]]]


def client_ip(request: Request, trusted: Iterable[str] = ()) -> Optional[str]:
    """rl_ip_key(rl_client_ip(...)) of the request: its peer's address, or the one
    the nearest trusted proxy saw (X-Forwarded-For lines joined in order)."""
    return asgi.client_ip(request.scope, trusted)


class RateLimitExceeded(HTTPException):
    """429 Too Many Requests: decision is the denial, headers its Retry-After
    (when it can be retried) and RateLimit fields."""

    def __init__(self, decision: Decision, headers: Dict[str, str]) -> None:
        super().__init__(status_code=429, headers=headers)
        self.decision = decision


class RateLimit:
    """A dependency (Depends(RateLimit(...))) that decides a request before its
    route runs, and answers the decision."""

    def __init__(self, limiter: AsyncLimiter, limits: Union[str, Mapping[str, Optional[KeyFunction]]], *,
                 trusted: Iterable[str] = (), rate: Optional[RateLike] = None, burst: Optional[int] = None,
                 cost: int = 1) -> None:
        self.limiter = limiter
        self.limits, rate, burst = _web.plan(limits, rate, burst)
        self.trusted = http._Trusted(trusted)
        self.rate, self.burst, self.cost = rate, burst, cost

    async def __call__(self, request: Request, response: Response) -> Decision:
        keys = []
        for key in self.limits.values():
            value = asgi.client_ip(request.scope, self.trusted) if key is None else key(request)
            keys.append(await value if inspect.isawaitable(value) else value)
        d = await _web.decide(self.limiter, self.limits, keys, self.rate, self.burst, self.cost)
        fields = _web.fields(self.limiter, d, self.rate, self.burst)
        if not d.allowed:
            raise RateLimitExceeded(d, fields)
        # FastAPI copies them to the route's answer, unless the route returns a Response of its own
        response.headers.update(fields)
        return d
