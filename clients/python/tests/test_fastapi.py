"""The FastAPI dependency: a route's limits keyed by its request (the address, the
form body), 429 raised as an HTTPException with Retry-After and the RateLimit
fields, and the fallback while the database is down (the sign-in example runs
in test/t/109_readme_apps.pl)."""
import asyncio
import uuid

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler

from conftest import dsn, sql
from ratelimit_client import AsyncLimiter, Decision, Source
from ratelimit_client.fastapi import RateLimit, RateLimitExceeded, client_ip

PATIENT = 5.0   # a loaded machine may take longer than the deadline to connect


def limited_app(limit):
    """An app whose one route is limited by limit: (app, the denials its handler saw)."""
    app = FastAPI()
    denied = []

    @app.exception_handler(RateLimitExceeded)
    async def on_denied(request, exc):
        denied.append(exc)
        return await http_exception_handler(request, exc)

    @app.post("/")
    async def index(d: Decision = Depends(limit)):
        return {"source": d.source.value, "remaining": d.remaining}
    return app, denied


def client(app, address="203.0.113.7"):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 4000)), base_url="http://app")


def test_allowed_then_denied_with_the_fields():
    async def main():
        async with AsyncLimiter(dsn("table"), deadline=PATIENT) as lim:
            name = "fastapi_" + uuid.uuid4().hex[:8]
            app, denied = limited_app(RateLimit(lim, name, trusted=["10.0.0.0/8"], rate=0.001, burst=2))
            async with client(app) as c:
                got = [await c.post("/") for _ in range(3)]
            async with client(app, "10.0.0.1") as c:
                behind = await c.post("/", headers={"X-Forwarded-For": "203.0.113.8"})
            assert [r.status_code for r in got] == [200, 200, 429]
            assert got[0].json() == {"source": "database", "remaining": 1}
            assert got[0].headers["RateLimit"] == f'"{name}";r=1;t=1000'
            assert got[0].headers["RateLimit-Policy"] == f'"{name}";q=2;w=2000'
            assert "Retry-After" not in got[0].headers
            assert got[2].headers["Retry-After"] == "1000" and got[2].headers["RateLimit"] == f'"{name}";r=0;t=1000'
            # the exception FastAPI's handlers see carries the decision
            assert len(denied) == 1 and denied[0].status_code == 429
            assert (denied[0].decision.allowed, denied[0].decision.limiter) == (False, name)
            # behind a trusted proxy: the address it saw, a budget of its own
            assert behind.status_code == 200
    asyncio.run(main())


def test_policies_keyed_by_the_form_body_all_or_nothing():
    async def email(request: Request) -> str:
        address = (await request.form()).get("email")
        if not address:
            raise HTTPException(400)
        return address

    def broken(request):
        raise LookupError("no key")

    async def main():
        async with AsyncLimiter(dsn("table"), deadline=PATIENT) as lim:
            address = "198.18.{}.{}".format(*uuid.uuid4().bytes[:2])
            account = uuid.uuid4().hex
            app, _ = limited_app(RateLimit(lim, {"sign_in_ip": None, "sign_in_failures": email}))
            async with client(app, address) as c:
                missing = await c.post("/", data={"password": "x"})
                got = [await c.post("/", data={"email": account}) for _ in range(6)]
            # a key function that fails: its error is the answer
            assert missing.status_code == 400
            assert [r.status_code for r in got] == [200] * 5 + [429]
            # the address paid for the five allowed only: not for the 400, nor for the denial
            assert sql("table", "SELECT remaining FROM rl_take('sign_in_ip', %s, 0)", (address,))[0][0] == 95
            # the binding limit's fields, by its policy
            assert got[4].headers["RateLimit"] == '"sign_in_failures";r=0;t=720'
            assert got[5].headers["RateLimit-Policy"] == '"sign_in_failures";q=5;w=3600'
            assert got[5].headers["Retry-After"] == "720"
            assert sql("table", "SELECT remaining FROM rl_take('sign_in_failures', %s, 0)", (account,))[0][0] == 0

            # any other error is the app's to answer (Starlette's 500), and nothing is taken
            other, _ = limited_app(RateLimit(lim, {"sign_in_ip": None, "sign_in_failures": broken}))
            async with client(other, address) as c:
                with pytest.raises(LookupError):
                    await c.post("/")
            assert sql("table", "SELECT remaining FROM rl_take('sign_in_ip', %s, 0)", (address,))[0][0] == 95
            assert client_ip(Request({"type": "http", "headers": [], "client": (address, 1)})) == address
    asyncio.run(main())


def test_decided_in_memory_while_the_database_is_down(server):
    async def main():
        async with AsyncLimiter(dsn("outage"), deadline=PATIENT, backoff=0.5) as lim:
            app, denied = limited_app(RateLimit(lim, "fastapi_outage", rate=0.001, burst=3))
            async with client(app, "198.18.{}.{}".format(*uuid.uuid4().bytes[:2])) as c:
                first = await c.post("/")
                server.stop()
                got = [await c.post("/") for _ in range(3)]
            assert first.json()["source"] == "database"
            assert [(r.status_code, r.json().get("source")) for r in got] == \
                [(200, "fallback"), (200, "fallback"), (429, None)]
            assert denied[0].decision.source == Source.FALLBACK and got[2].headers["Retry-After"] == "1000"
            assert got[1].headers["RateLimit"] == '"fastapi_outage";r=0;t=1000'
    asyncio.run(main())
