"""The HTTP integrations: RateLimit fields as rl_headers computes them, the Flask
decorator and the ASGI middleware (the sign-in example runs in test/t/109_readme_apps.pl)."""
import asyncio
import http.client
import socket
import urllib.parse
import uuid

from conftest import dsn, sql
from ratelimit_client import AsyncLimiter, Source
from ratelimit_client.asgi import RateLimitMiddleware
from ratelimit_client.http import headers, ip_key


def test_headers_equal_rl_headers(store, make_limiter):
    """Allowed, denied, full, cost > burst: the fields the client computes are the SQL's."""
    # a generous deadline: the database decides every call
    lim = make_limiter(store, deadline=5.0)
    key = uuid.uuid4().hex
    seen = 0
    for rate, burst, cost in [(0.5, 3, 1), (0.5, 3, 1), (0.5, 3, 2), (0.5, 3, 0), (0.5, 3, 4), (2.5, 7, 1),
                              (1 / 3600, 5, 1)]:
        d = lim.take("headers", f"{key}{rate}", rate, burst, cost)
        if d.source != Source.DATABASE:
            continue
        want = sql(store, "SELECT rl_headers(ROW(%s, %s, %s, %s)::rl_decision, 'headers', %s, %s)",
                   (d.allowed, d.remaining, None if d.retry_after == float("inf") else d.retry_after,
                    d.reset_after, rate, burst))[0][0]
        assert headers(d, "headers", rate, burst) == want
        seen += 1
    assert seen >= 5
    assert headers(d, 'q"uo\\te', 1, 1)["RateLimit-Policy"].startswith('"q\\"uo\\\\te"')


def test_ip_key_equals_rl_ip_key(store):
    for ip in ["203.0.113.7", "::ffff:10.0.0.1", "2001:db8:1:2:3:4:5:6", "fe80::1", "::a00:2"]:
        for prefix in (64, 48, 128):
            assert ip_key(ip, prefix) == sql(store, "SELECT rl_ip_key(%s::inet, %s)", (ip, prefix))[0][0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, form, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, urllib.parse.urlencode(form),
                 {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status, dict(r.getheaders())


def test_flask_decorator_trusts_only_its_proxies(make_limiter):
    import flask

    from ratelimit_client.flask import rate_limit
    lim = make_limiter("table")
    app = flask.Flask(__name__)
    name = "flask_" + uuid.uuid4().hex[:8]

    @app.get("/")
    @rate_limit(lim, name, trusted=["127.0.0.0/8"], rate=0.001, burst=2)
    def index():
        return "hello\n"

    @app.get("/direct")
    @rate_limit(lim, name + "_d", rate=0.001, burst=1)
    def direct():
        return "hello\n"
    client = app.test_client()
    # behind a trusted proxy on 127.0.0.1: the address it saw
    a = [client.get("/", headers={"X-Forwarded-For": "203.0.113.7"}) for _ in range(3)]
    assert [r.status_code for r in a] == [200, 200, 429]
    assert a[0].headers["RateLimit"] == f'"{name}";r=1;t=1000' and "Retry-After" in a[2].headers
    assert client.get("/", headers={"X-Forwarded-For": "203.0.113.8"}).status_code == 200
    # several X-Forwarded-For lines are one list, in the order they arrived: a client's own line is left
    two = client.get("/", headers=[("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "203.0.113.7")])
    assert two.status_code == 429
    # no proxy trusted: a made-up header is ignored, the peer is limited
    assert client.get("/direct", headers={"X-Forwarded-For": "198.51.100.1"}).status_code == 200
    assert client.get("/direct", headers={"X-Forwarded-For": "198.51.100.2"}).status_code == 429


def test_flask_denial_is_raised_to_the_apps_handler(make_limiter):
    """A denial raises RateLimitExceeded (werkzeug's TooManyRequests): an app's JSON
    handler sees the decision; without one, werkzeug's 429 carries the fields."""
    import flask
    from werkzeug.exceptions import TooManyRequests

    from ratelimit_client.flask import RateLimitExceeded, rate_limit
    lim = make_limiter("table", deadline=5.0)
    name = "flask_raise_" + uuid.uuid4().hex[:8]
    app = flask.Flask(__name__)
    ran = []

    @app.get("/json")
    @rate_limit(lim, name, rate="1/hour")
    def json_view():
        ran.append(1)
        return "hello\n"

    @app.get("/plain")
    @rate_limit(lim, name + "_p", rate="1/hour")
    def plain_view():
        return "hello\n"

    @app.errorhandler(RateLimitExceeded)
    def limited(e):
        assert isinstance(e, TooManyRequests)
        if flask.request.path != "/json":
            return e
        return {"limiter": e.decision.limiter, "retry_after": round(e.decision.retry_after)}, 429, e.headers
    client = app.test_client()
    assert client.get("/json").status_code == 200
    r = client.get("/json")
    assert r.status_code == 429 and r.json == {"limiter": name, "retry_after": 3600} and ran == [1]
    assert r.headers["Retry-After"] == "3600" and r.headers["RateLimit"] == f'"{name}";r=0;t=3600'
    client.get("/plain")
    r = client.get("/plain")
    assert r.status_code == 429 and r.headers["Retry-After"] == "3600"
    assert r.headers["RateLimit-Policy"] == f'"{name}_p";q=1;w=3600'


def asgi_call(app, client, headers=()):
    scope = {"type": "http", "method": "GET", "path": "/", "headers": list(headers), "client": client}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)
    return scope, receive, send, sent


async def hello(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello\n"})


def test_asgi_middleware():
    async def main():
        async with AsyncLimiter(dsn("table")) as lim:
            name = "asgi_" + uuid.uuid4().hex[:8]
            app = RateLimitMiddleware(hello, lim, name, trusted=["10.0.0.0/8"], rate=0.001, burst=2)
            results = []
            for xff in [b"203.0.113.7", b"203.0.113.7", b"203.0.113.7", b"203.0.113.9"]:
                scope, receive, send, sent = asgi_call(app, ("10.0.0.1", 5000), [(b"x-forwarded-for", xff)])
                await app(scope, receive, send)
                start = sent[0]
                results.append((start["status"], dict(start["headers"])))
            assert [s for s, _ in results] == [200, 200, 429, 200]
            assert results[0][1][b"ratelimit"] == f'"{name}";r=1;t=1000'.encode()
            assert results[2][1][b"retry-after"] == b"1000"
            # an untrusted peer's header is its own invention
            for expect in (200, 200, 429):
                scope, receive, send, sent = asgi_call(app, ("192.0.2.1", 1), [(b"x-forwarded-for", b"1.1.1.1")])
                await app(scope, receive, send)
                assert sent[0]["status"] == expect
            # lifespan and websockets pass through
            passed = []

            async def other(scope, receive, send):
                passed.append(scope["type"])
            await RateLimitMiddleware(other, lim, name)({"type": "lifespan"}, None, None)
            assert passed == ["lifespan"]
            # on_denied answers a denial with an ASGI application of its own (a JSON body)
            seen = []

            def on_denied(scope, decision, headers):
                seen.append((decision.limiter, decision.allowed, headers["Retry-After"]))

                async def answer(scope, receive, send):
                    await send({"type": "http.response.start", "status": 429,
                                "headers": [(b"content-type", b"application/json")]})
                    await send({"type": "http.response.body", "body": b'{"error": "slow down"}'})
                return answer
            custom = RateLimitMiddleware(hello, lim, name + "_j", rate="1/hour", on_denied=on_denied)
            bodies = []
            for _ in range(2):
                scope, receive, send, sent = asgi_call(custom, ("192.0.2.2", 1))
                await custom(scope, receive, send)
                bodies.append((sent[0]["status"], sent[1]["body"]))
            assert bodies == [(200, b"hello\n"), (429, b'{"error": "slow down"}')]
            assert seen == [(name + "_j", False, "3600")]
    asyncio.run(main())
