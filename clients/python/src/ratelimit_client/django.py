"""Django: a view decorator, is_ratelimited and a middleware that answers 429.

    # settings.py
    MIDDLEWARE = [..., "ratelimit_client.django.RateLimitMiddleware"]
    RATELIMIT_TRUSTED_PROXIES = ["10.0.0.0/8"]      # the proxies whose X-Forwarded-For is believed

    # views.py
    from ratelimit_client.django import rate_limit

    @rate_limit(limiter, {"sign_in_ip": None, "sign_in_failures": lambda request: request.POST["email"]})
    def login(request): ...

limits is one limiter name (keyed by the client address) or a dict of
limiter name to a function of the HttpRequest that answers the key, or None
for the client address; several are decided all or nothing.  Without rate
and burst, the limiters' policies decide.  A denial raises
RateLimitExceeded (a PermissionDenied, so without the middleware Django
answers 403); the middleware answers it 429 with Retry-After and the
RateLimit fields, or by the view RATELIMIT_VIEW names.  The limiter is a
Limiter (threads): Django's sync views.
"""

import functools
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, TypeVar, Union

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from . import _web, http
from ._core import Decision
from ._rate import RateLike
from .client import Limiter

KeyFunction = Callable[[HttpRequest], str]
Limits = Union[str, Mapping[str, Optional[KeyFunction]]]
F = TypeVar("F", bound=Callable[..., Any])


def trusted_proxies() -> Iterable[str]:
    """settings.RATELIMIT_TRUSTED_PROXIES: addresses or CIDRs, none by default."""
    return getattr(settings, "RATELIMIT_TRUSTED_PROXIES", ())


def client_ip(request: HttpRequest, trusted: Optional[Iterable[str]] = None) -> Optional[str]:
    """rl_ip_key(rl_client_ip(...)) of the request: REMOTE_ADDR, or the address the
    nearest trusted proxy saw in X-Forwarded-For (trusted: the setting's by default)."""
    return http.ip_key(http.client_ip(request.META.get("REMOTE_ADDR") or None,
                                      request.META.get("HTTP_X_FORWARDED_FOR"),
                                      trusted_proxies() if trusted is None else trusted))


class RateLimitExceeded(PermissionDenied):
    """A denial: decision is it, headers its Retry-After (when it can be retried)
    and RateLimit fields.  RateLimitMiddleware answers it 429."""

    def __init__(self, decision: Decision, headers: Dict[str, str]) -> None:
        super().__init__("Too many requests")
        self.decision = decision
        self.headers = headers


def _decide(request: HttpRequest, limiter: Limiter, names: Dict[str, Optional[KeyFunction]], rate: Optional[float],
            burst: Optional[int], cost: int, trusted: Optional[Iterable[str]]) -> Tuple[Decision, Dict[str, str]]:
    keys = [client_ip(request, trusted) if key is None else key(request) for key in names.values()]
    d = _web.decide(limiter, names, keys, rate, burst, cost)
    request.limited = getattr(request, "limited", False) or not d.allowed
    return d, _web.fields(limiter, d, rate, burst)


def is_ratelimited(request: HttpRequest, limiter: Limiter, limits: Limits, *, rate: Optional[RateLike] = None,
                   burst: Optional[int] = None, cost: int = 1, trusted: Optional[Iterable[str]] = None) -> bool:
    """Take cost for the request from each of limits; true when denied (request.limited too)."""
    names, rate, burst = _web.plan(limits, rate, burst)
    return not _decide(request, limiter, names, rate, burst, cost, trusted)[0].allowed


def rate_limit(limiter: Limiter, limits: Limits, *, rate: Optional[RateLike] = None, burst: Optional[int] = None,
               cost: int = 1, trusted: Optional[Iterable[str]] = None, block: bool = True) -> Callable[[F], F]:
    """Decorate a view: a denial raises RateLimitExceeded (the view does not run),
    or with block=False runs the view with request.limited true; an allowed
    request's response gets the RateLimit fields."""
    names, rate, burst = _web.plan(limits, rate, burst)

    def decorator(view):
        @functools.wraps(view)
        def wrapped(request, *args, **kwargs):
            d, fields = _decide(request, limiter, names, rate, burst, cost, trusted)
            if not d.allowed and block:
                raise RateLimitExceeded(d, fields)
            response = view(request, *args, **kwargs)
            for name, value in fields.items():
                if name not in response:
                    response[name] = value
            return response
        return wrapped  # type: ignore[return-value]
    return decorator


class RateLimitMiddleware:
    """Answers RateLimitExceeded: 429 text/plain with the fields, or by the view
    settings.RATELIMIT_VIEW names (a dotted path), called as view(request, exception)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> Optional[HttpResponse]:
        if not isinstance(exception, RateLimitExceeded):
            return None
        view = getattr(settings, "RATELIMIT_VIEW", None)
        if view:
            return import_string(view)(request, exception)
        response = HttpResponse("Too many requests\n", status=429, content_type="text/plain; charset=utf-8")
        for name, value in exception.headers.items():
            response[name] = value
        return response
