"""The Django integration on a real cluster: the decorator, is_ratelimited, the
middleware's 429 and RATELIMIT_VIEW, and the trusted proxies of the settings."""
import json
import os
import uuid

import pytest

django = pytest.importorskip("django")
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="test", DEBUG=False,
                       MIDDLEWARE=["ratelimit_client.django.RateLimitMiddleware"],
                       RATELIMIT_TRUSTED_PROXIES=["127.0.0.0/8"])
    django.setup()

from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from conftest import dsn  # noqa: E402
from ratelimit_client import Limiter  # noqa: E402
from ratelimit_client.django import RateLimitExceeded, client_ip, is_ratelimited, rate_limit  # noqa: E402

limiter = Limiter(dsn("table"), deadline=5.0) if "RL_TABLE_DSN" in os.environ else None
run = uuid.uuid4().hex[:8]


def email(request):
    return request.POST["email"]


@rate_limit(limiter, {f"dj_ip_{run}": None, f"dj_email_{run}": email}, rate="2/hour")
def login(request):
    return HttpResponse("signed in\n")


@rate_limit(limiter, f"dj_soft_{run}", rate="1/hour", block=False)
def soft(request):
    return HttpResponse("limited\n" if request.limited else "fine\n")


def manual(request):
    if is_ratelimited(request, limiter, f"dj_manual_{run}", rate="1/hour", trusted=()):
        return HttpResponse("slow down\n", status=429)
    return HttpResponse(client_ip(request, ()))


def denied_view(request, exception):
    return JsonResponse({"limiter": exception.decision.limiter}, status=429, headers=exception.headers)


urlpatterns = [path("login", login), path("soft", soft), path("manual", manual)]


@pytest.fixture(autouse=True)
def database():
    """The views' limiter is the table store's cluster: skipped without it."""
    dsn("table")


def test_decorator_and_middleware(make_limiter):
    c = Client()
    statuses = []
    for mail in ("a@example.com", "b@example.com", "c@example.com"):
        statuses.append(c.post("/login", {"email": mail}, HTTP_X_FORWARDED_FOR="203.0.113.7"))
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert statuses[0]["RateLimit"].startswith(f'"dj_ip_{run}";r=1')
    denied = statuses[2]
    assert denied["Retry-After"] == "1800" and denied["Content-Type"].startswith("text/plain")
    assert denied["RateLimit-Policy"] == f'"dj_ip_{run}";q=2;w=3600'
    # another address behind the trusted proxy: its own bucket; one e-mail address's is shared
    other = [c.post("/login", {"email": "a@example.com"}, HTTP_X_FORWARDED_FOR="203.0.113.8") for _ in range(2)]
    assert [r.status_code for r in other] == [200, 429]


def test_trusted_proxies_setting():
    c = Client()
    # a peer not among RATELIMIT_TRUSTED_PROXIES: its header is its own invention
    with override_settings(RATELIMIT_TRUSTED_PROXIES=["10.0.0.0/8"]):
        r = [c.post("/login", {"email": f"{i}@example.org"}, REMOTE_ADDR="192.0.2.9",
                    HTTP_X_FORWARDED_FOR=f"198.51.100.{i}") for i in range(3)]
    assert [x.status_code for x in r] == [200, 200, 429]


def test_block_false_and_is_ratelimited():
    c = Client()
    assert [c.get("/soft").content for _ in range(2)] == [b"fine\n", b"limited\n"]
    # is_ratelimited with trusted=(): the peer, not the header
    first = c.get("/manual", HTTP_X_FORWARDED_FOR="198.51.100.77")
    assert first.status_code == 200 and first.content == b"127.0.0.1"
    assert c.get("/manual", HTTP_X_FORWARDED_FOR="198.51.100.78").status_code == 429


def test_ratelimit_view_and_without_middleware():
    c = Client()
    with override_settings(RATELIMIT_VIEW=f"{__name__}.denied_view"):
        r = [c.post("/login", {"email": "v@example.com"}, REMOTE_ADDR="192.0.2.50") for _ in range(3)]
    assert r[2].status_code == 429 and json.loads(r[2].content)["limiter"].startswith("dj_")
    assert r[2]["Retry-After"] == "1800"
    # without the middleware: a PermissionDenied, Django's 403
    with override_settings(MIDDLEWARE=[]):
        assert Client().post("/login", {"email": "v@example.com"}, REMOTE_ADDR="192.0.2.50").status_code == 403
    assert issubclass(RateLimitExceeded, django.core.exceptions.PermissionDenied)
