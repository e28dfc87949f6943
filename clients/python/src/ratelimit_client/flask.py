"""A Flask view decorator: 429 with Retry-After and the RateLimit fields.

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
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar, Union

import flask

from . import _web, http
from ._rate import RateLike
from .client import Limiter

KeyFunction = Callable[[], str]
F = TypeVar("F", bound=Callable[..., Any])


def client_ip(trusted: Iterable[str] = ()) -> Optional[str]:
    """rl_ip_key(rl_client_ip(...)) of the request: its peer's address, or the one
    the nearest trusted proxy saw (X-Forwarded-For lines joined in order)."""
    xff = ", ".join(flask.request.headers.getlist("X-Forwarded-For")) or None
    return http.ip_key(http.client_ip(flask.request.remote_addr, xff, trusted))


def rate_limit(limiter: Limiter, limits: Union[str, Mapping[str, Optional[KeyFunction]]], *,
               trusted: Iterable[str] = (), rate: Optional[RateLike] = None, burst: Optional[int] = None,
               cost: int = 1) -> Callable[[F], F]:
    """Decorate a view: a denied request is answered 429 (the view does not run),
    an allowed one gets the RateLimit fields on its response."""
    limits, rate, burst = _web.plan(limits, rate, burst)
    trusted = http._Trusted(trusted)

    def decorator(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            keys = [client_ip(trusted) if key is None else key() for key in limits.values()]
            d = _web.decide(limiter, limits, keys, rate, burst, cost)
            fields = _web.fields(limiter, d, rate, burst)
            if not d.allowed:
                return flask.Response("Too many requests\n", 429, fields, mimetype="text/plain")
            response = flask.make_response(view(*args, **kwargs))
            for name, value in fields.items():
                response.headers.setdefault(name, value)
            return response
        return wrapped  # type: ignore[return-value]
    return decorator
