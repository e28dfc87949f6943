"""A Flask view decorator: a denial raises RateLimitExceeded, werkzeug's 429
(TooManyRequests) with Retry-After and the RateLimit fields.

    from ratelimit_client.flask import client_ip, rate_limit

    @app.post("/login")
    @rate_limit(limiter, {"sign_in_ip": client_ip,
                          "sign_in_failures": lambda: request.form.get("email") or abort(400)})
    def login(): ...

limits is one limiter name (keyed by the client address) or a dict of
limiter name to a function of no arguments that answers the key (flask.request
is at hand); several are decided all or nothing (take_all).  Without rate
and burst, the limiters' policies decide.
"""

import functools
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar, Union

import flask
from werkzeug.exceptions import TooManyRequests

from . import _web, http
from ._core import Decision
from ._rate import RateLike
from .client import Limiter

KeyFunction = Callable[[], str]
F = TypeVar("F", bound=Callable[..., Any])


def client_ip(trusted: Iterable[str] = ()) -> Optional[str]:
    """rl_ip_key(rl_client_ip(...)) of the request: its peer's address, or the one
    the nearest trusted proxy saw (X-Forwarded-For lines joined in order)."""
    xff = ", ".join(flask.request.headers.getlist("X-Forwarded-For")) or None
    return http.ip_key(http.client_ip(flask.request.remote_addr, xff, trusted))


class RateLimitExceeded(TooManyRequests):
    """429 Too Many Requests, raised for the app's handlers (@app.errorhandler(429)
    or of this class): decision is the denial, headers its Retry-After (when it
    can be retried) and RateLimit fields, which the response carries."""

    def __init__(self, decision: Decision, headers: Dict[str, str]) -> None:
        super().__init__()
        self.decision = decision
        self.headers = headers

    def get_headers(self, environ: Optional[Dict[str, Any]] = None,
                    scope: Optional[Dict[str, Any]] = None) -> List[Tuple[str, str]]:
        return super().get_headers(environ, scope) + list(self.headers.items())


def rate_limit(limiter: Limiter, limits: Union[str, Mapping[str, Optional[KeyFunction]]], *,
               trusted: Iterable[str] = (), rate: Optional[RateLike] = None, burst: Optional[int] = None,
               cost: int = 1) -> Callable[[F], F]:
    """Decorate a view: a denied request raises RateLimitExceeded (the view does not
    run), an allowed one gets the RateLimit fields on its response."""
    limits, rate, burst = _web.plan(limits, rate, burst)
    trusted = http._Trusted(trusted)

    def decorator(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            keys = [client_ip(trusted) if key is None else key() for key in limits.values()]
            d = _web.decide(limiter, limits, keys, rate, burst, cost)
            fields = _web.fields(limiter, d, rate, burst)
            if not d.allowed:
                raise RateLimitExceeded(d, fields)
            response = flask.make_response(view(*args, **kwargs))
            for name, value in fields.items():
                response.headers.setdefault(name, value)
            return response
        return wrapped  # type: ignore[return-value]
    return decorator
