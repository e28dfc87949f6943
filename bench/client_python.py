"""Decisions per second through the Python client (ratelimit_client), beside
the bare psycopg call: the database path at 1 and 8 callers (threads, and
asyncio tasks), the pre-check path and the fallback path.

    client_python.py CONNINFO SECONDS       (bench/client_python runs it)
"""
import asyncio
import itertools
import sys
import threading
import time

import psycopg

from ratelimit_client import AsyncLimiter, Limiter, Source

CONNINFO, SECONDS = sys.argv[1], float(sys.argv[2])
TAKE = "SELECT allowed, remaining, retry_after, reset_after FROM rl_take(%s::text, %s::text, %s::float8, %s::int4, %s::int4)"


def rate(n_threads, make_call):
    """Calls per second of n_threads threads, each running its own make_call() until the time is up."""
    counts = [0] * n_threads
    start = threading.Barrier(n_threads + 1)
    end = [0.0]

    def run(i):
        call = make_call(i)
        start.wait()
        n = 0
        while time.monotonic() < end[0]:
            call()
            n += 1
        counts[i] = n
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    end[0] = time.monotonic() + SECONDS
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / SECONDS


def bare(i):
    conn = psycopg.connect(CONNINFO, autocommit=True, prepare_threshold=None)
    keys = itertools.count()
    return lambda: conn.execute(TAKE, ("bench_bare", f"{i}-{next(keys)}", 1000.0, 1000, 1)).fetchone()


def through(limiter, name):
    def make(i):
        keys = itertools.count()

        def call():
            d = limiter.take(name, f"{i}-{next(keys)}", 1000.0, 1000)
            assert d.source == Source.DATABASE, limiter._core.failure
        return call
    return make


def main():
    print(f"{SECONDS:g} s per figure; decisions per second")
    print("| path | 1 caller | 8 callers |")
    print("| --- | --- | --- |")
    rows = []
    rows.append(("bare psycopg, threads (each its own connection)", rate(1, bare), rate(8, bare)))
    with Limiter(CONNINFO, deadline=5.0, pool_size=8) as lim:
        rows.append(("through Limiter, threads (database)", rate(1, through(lim, "bench_client")),
                     rate(8, through(lim, "bench_client"))))
    with Limiter(CONNINFO, deadline=5.0) as lim:
        lim.take("bench_flood", "k", 0.001, 1)
        lim.take("bench_flood", "k", 0.001, 1)

        def flood(i):
            return lambda: lim.take("bench_flood", "k", 0.001, 1)
        rows.append(("pre-check (one key far over its limit)", rate(1, flood), rate(8, flood)))
        assert lim.stats().database == 2
    with Limiter("host=127.0.0.1 port=1 sslmode=disable", backoff=3600) as lim:
        def fallback(i):
            keys = itertools.cycle([f"{i}-{k}" for k in range(1000)])
            return lambda: lim.take("bench_fallback", next(keys), 1000000.0, 1000)
        rows.append(("fallback (no database)", rate(1, fallback), rate(8, fallback)))
    rows.extend(asyncio.run(async_rows()))
    for name, one, eight in rows:
        print(f"| {name} | {one:,.0f} | {eight:,.0f} |")


async def async_rate(n_tasks, make_call):
    counts = [0] * n_tasks
    end = time.monotonic() + SECONDS

    async def run(i):
        call = await make_call(i)
        n = 0
        while time.monotonic() < end:
            await call()
            n += 1
        counts[i] = n
    await asyncio.gather(*[run(i) for i in range(n_tasks)])
    return sum(counts) / SECONDS


async def async_rows():
    async def bare_async(i):
        conn = await psycopg.AsyncConnection.connect(CONNINFO, autocommit=True, prepare_threshold=None)
        keys = itertools.count()

        async def call():
            await (await conn.execute(TAKE, ("bench_abare", f"{i}-{next(keys)}", 1000.0, 1000, 1))).fetchone()
        return call
    rows = [("bare psycopg, asyncio tasks (each its own connection)",
             await async_rate(1, bare_async), await async_rate(8, bare_async))]
    async with AsyncLimiter(CONNINFO, deadline=5.0, pool_size=8) as lim:
        async def through_async(i):
            keys = itertools.count()

            async def call():
                d = await lim.take("bench_aclient", f"{i}-{next(keys)}", 1000.0, 1000)
                assert d.source == Source.DATABASE, lim._core.failure
            return call
        rows.append(("through AsyncLimiter, asyncio tasks (database)",
                     await async_rate(1, through_async), await async_rate(8, through_async)))
    return rows


main()
