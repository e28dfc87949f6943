"""An ASGI middleware: 429 with Retry-After and the RateLimit fields.

    app = RateLimitMiddleware(app, limiter, "api", rate="100/minute")     # an AsyncLimiter

limits is one limiter name (keyed by the client address) or a dict of
limiter name to a function of the ASGI scope that answers the key (client_ip
is one); several are decided all or nothing.  Only HTTP requests are limited.
on_denied(scope, decision, headers) answers the ASGI application that answers
a denial (a Starlette JSONResponse(..., 429, headers=headers) is one); by
default too_many_requests, a text/plain 429.
"""

from typing import (Any, Awaitable, Callable, Dict, Iterable, List, Mapping, MutableMapping, Optional, Tuple,
                    Union)

from . import _web, http
from ._core import Decision
from ._rate import RateLike
from .aio import AsyncLimiter

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
KeyFunction = Callable[[Scope], str]


def client_ip(scope: Scope, trusted: Iterable[str] = ()) -> Optional[str]:
    """rl_ip_key(rl_client_ip(...)) of an ASGI request: scope's client, or the address
    the nearest trusted proxy saw (X-Forwarded-For lines joined in order)."""
    lines = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"x-forwarded-for"]
    client = scope.get("client")
    return http.ip_key(http.client_ip(client[0] if client else None, ", ".join(lines) or None, trusted))


OnDenied = Callable[[Scope, Decision, Dict[str, str]], ASGIApp]


def _raw(headers: Dict[str, str]) -> List[Tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def too_many_requests(scope: Scope, decision: Decision, headers: Dict[str, str]) -> ASGIApp:
    """The default answer to a denial: 429, text/plain, with headers."""
    fields = [(b"content-type", b"text/plain; charset=utf-8")] + _raw(headers)

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 429, "headers": fields})
        await send({"type": "http.response.body", "body": b"Too many requests\n"})
    return answer


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, limiter: AsyncLimiter, limits: Union[str, Mapping[str, Optional[KeyFunction]]],
                 *, trusted: Iterable[str] = (), rate: Optional[RateLike] = None, burst: Optional[int] = None,
                 cost: int = 1, on_denied: OnDenied = too_many_requests) -> None:
        self.app = app
        self.on_denied = on_denied
        self.limiter = limiter
        self.limits, rate, burst = _web.plan(limits, rate, burst)
        self.trusted = http._Trusted(trusted)
        self.rate, self.burst, self.cost = rate, burst, cost

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        keys = [client_ip(scope, self.trusted) if key is None else key(scope) for key in self.limits.values()]
        d = await _web.decide(self.limiter, self.limits, keys, self.rate, self.burst, self.cost)
        headers = _web.fields(self.limiter, d, self.rate, self.burst)
        if not d.allowed:
            return await self.on_denied(scope, d, headers)(scope, receive, send)
        fields = _raw(headers)

        async def send_with_fields(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", ())) + fields)
            await send(message)

        await self.app(scope, receive, send_with_fields)
