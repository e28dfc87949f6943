"""The database stopped, refused, restarted and stalled (SIGSTOP): the limit holds in memory."""
import asyncio
import logging
import math
import threading
import time
import uuid

import pytest

from conftest import dsn, sql, wait_for
from ratelimit_client import AsyncLimiter, Policy, Request, Source, _core

DEADLINE = 0.25
MARGIN = 0.25   # a loaded machine's scheduling; the stall itself lasts seconds
# where the deadline is not what a test checks: a loaded machine may take longer
# than DEADLINE to connect, and a server that is stopped refuses at once
PATIENT = 5.0


def fresh():
    return uuid.uuid4().hex


def warm_pool(lim, limiter):
    """The database decides a call of the limiter: its pool holds a connection (a loaded machine
    may take longer than the deadline to connect, and the limiter backs off until it has)."""
    assert wait_for(lambda: lim.take(limiter, fresh(), 1000, 1000).source == Source.DATABASE, 10), \
        lim._core.failure
    return lim.stats()


async def until_database(take, timeout=10.0):
    """Calls of take() until the database decides one, for at most timeout seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (await take()).source == Source.DATABASE:
            return True
        await asyncio.sleep(0.02)
    return False


def timed(call, *args):
    """(answer, seconds) of a call, which must not hang: a broken deadline fails here."""
    box = []
    start = time.monotonic()
    worker = threading.Thread(target=lambda: box.append(call(*args)), daemon=True)
    worker.start()
    worker.join(5)
    assert box, "the call did not return within 5 s"
    return box[0], time.monotonic() - start


def test_stopped_server_falls_back_and_recovers(server, make_limiter, caplog):
    """Spent 3 of 5 in the database: 2 more in memory, one warning, counted by reason; back after the backoff."""
    lim = make_limiter("outage", backoff=0.5, deadline=PATIENT)
    key = fresh()
    for _ in range(3):
        assert lim.take("outage_stop", key, 0.001, 5).source == Source.DATABASE
    server.stop()
    caplog.set_level(logging.WARNING, logger="ratelimit_client")
    got = [lim.take("outage_stop", key, 0.001, 5) for _ in range(4)]
    assert [(d.allowed, d.source) for d in got] == [(True, Source.FALLBACK)] * 2 + [(False, Source.FALLBACK)] * 2
    assert math.isclose(got[2].retry_after, 1000, rel_tol=0.01)
    warnings = [r for r in caplog.records if r.name == "ratelimit_client"]
    assert len(warnings) == 1 and '"outage_stop"' in warnings[0].getMessage()
    assert "error" in warnings[0].getMessage()
    s = lim.stats()
    assert (s.fallback, s.fallback_error, s.fallback_timeout) == (4, 4, 0)
    server.start()
    time.sleep(0.6)
    d = lim.take("outage_stop", fresh(), 0.001, 5)
    assert d.source == Source.DATABASE


def test_refused_server_is_tried_once_per_backoff(server, make_limiter, monkeypatch):
    """8 threads for 1.5 s against a stopped server: at most one attempt per interval."""
    lim = make_limiter("outage", backoff=0.3)
    server.stop()
    # the failure that starts the backoff (while healthy, every call may try)
    assert lim.take("outage_backoff", fresh(), 1000, 1000).source == Source.FALLBACK
    attempts = []
    real_db = lim._db
    # an attempt's time is the clock reading its call decided on (a thread may be
    # descheduled before it connects): the calling thread's last one
    seen = threading.local()
    real_clock = _core.mono_us

    def clock():
        seen.now = real_clock()
        return seen.now
    monkeypatch.setattr(_core, "mono_us", clock)

    def counting(plan):
        attempts.append(seen.now)
        return real_db(plan)
    lim._db = counting
    end = time.monotonic() + 1.5
    slowest = []

    def run():
        k = fresh()
        while time.monotonic() < end:
            d, took = timed(lim.take, "outage_backoff", k, 1000, 1000)
            assert d.source == Source.FALLBACK
            slowest.append(took)
            # callers that do other work too: eight threads spinning on two
            # CPUs would starve the probe of the GIL, not of the database
            time.sleep(0.001)
    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    attempts.sort()
    assert all(b - a >= 300000 for a, b in zip(attempts, attempts[1:])), attempts
    assert 1 <= len(attempts) <= 1.5 / 0.3 + 2
    assert max(slowest) < DEADLINE + MARGIN


def test_stalled_server_deadline(server, make_limiter, caplog):
    """All server processes SIGSTOPped: each call returns within the deadline and decides in memory."""
    lim = make_limiter("outage", backoff=0.5, pool_size=2)
    base = warm_pool(lim, "outage_stall_warm")
    key = fresh()
    assert lim.take("outage_stall", key, 0.001, 5).source == Source.DATABASE
    server.sigstop()
    caplog.set_level(logging.WARNING, logger="ratelimit_client")
    caplog.clear()
    took = []
    decisions = []
    for i in range(12):
        # a pooled connection's query, a new connection, and the backoff in between
        d, t = timed(lim.take, "outage_stall", key if i < 6 else fresh(), 0.001, 5)
        decisions.append(d)
        took.append(t)
        time.sleep(0.1)
    assert max(took) < DEADLINE + MARGIN, took
    assert all(d.source == Source.FALLBACK for d in decisions)
    assert [d.allowed for d in decisions[:6]] == [True] * 4 + [False] * 2
    s = lim.stats()
    assert s.fallback_timeout - base.fallback_timeout == 12 and s.fallback_error == base.fallback_error
    assert sum(1 for r in caplog.records if r.name == "ratelimit_client") == 1
    server.sigcont()
    # the cancelled queries: no backend still works on them, and the database decides again
    assert wait_for(lambda: lim.take("outage_stall", fresh(), 0.001, 5).source == Source.DATABASE, 5)
    assert wait_for(lambda: sql("outage", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%rl_take%%'"
                                          " AND state = 'active' AND pid <> pg_backend_pid()")[0][0] == 0, 5)


def test_stalled_server_deadline_asyncio(server):
    async def main():
        async with AsyncLimiter(dsn("outage"), backoff=0.4) as lim:
            assert await until_database(lambda: lim.take("outage_astall", fresh(), 0.001, 3))
            key = fresh()
            server.sigstop()
            took = []
            for i in range(8):
                start = time.monotonic()
                d = await asyncio.wait_for(lim.take("outage_astall", key if i < 4 else fresh(), 0.001, 3), 5)
                took.append(time.monotonic() - start)
                assert d.source == Source.FALLBACK
                await asyncio.sleep(0.1)
            assert max(took) < DEADLINE + MARGIN, took
            # the loop is never blocked: other work runs while a connection to the stalled server
            # waits out its deadline (a loop blocked by the wait would stand still for all of it)
            async with AsyncLimiter(dsn("outage"), deadline=2.0) as slow:
                ticks = []
                start = time.monotonic()
                probe = asyncio.ensure_future(slow.take("outage_astall", fresh(), 0.001, 3))
                while not probe.done():
                    ticks.append(time.monotonic())
                    await asyncio.sleep(0.02)
                ticks.append(time.monotonic())
                assert (await probe).source == Source.FALLBACK and slow.stats().fallback_timeout == 1
                assert ticks[-1] - start >= 1.9
                assert max(b - a for a, b in zip([start] + ticks, ticks)) < 1.0
            server.sigcont()
            # back to the database once a probe gets through in its deadline
            assert await until_database(lambda: lim.take("outage_astall", fresh(), 0.001, 3))
    asyncio.run(main())


@pytest.mark.parametrize("defence", ["checkout check", "one more try"])
def test_restart_with_stale_pool(server, make_limiter, monkeypatch, defence):
    """Four pooled connections go stale in a restart: the first call after it is the database's,
    whether the checkout finds them closed or a query on one fails (then the others go too)."""
    if defence == "one more try":
        from ratelimit_client import client
        monkeypatch.setattr(client, "_stale", lambda pgconn: False)
    lim = make_limiter("outage", pool_size=4, backoff=30, deadline=PATIENT)
    key = fresh()
    # four connections open at once, then idle (calls on threads could
    # each reuse the one another has just given back)
    deadline = time.monotonic() + PATIENT
    opened = []
    for _ in range(4):
        assert lim._pool.acquire(deadline) is None
        opened.append(lim._pool.connect(deadline))
    for conn in opened:
        lim._pool.release(conn, keep=True)
    assert len(lim._pool.idle) == 4
    assert lim.take("outage_restart", fresh(), 1, 1).source == Source.DATABASE
    drops = []
    real_drop = lim._pool.drop_idle
    lim._pool.drop_idle = lambda: (drops.append(1), real_drop())
    server.restart()
    for _ in range(6):
        d = lim.take("outage_restart", key, 0.001, 10)
        assert d.source == Source.DATABASE, lim._core.failure
    assert lim.stats().fallback == 0
    # the check finds them all closed without a query; else one query fails and takes the others along
    assert len(drops) == (0 if defence == "checkout check" else 1)


def test_policies_during_an_outage(server, make_limiter):
    """The last policies read decide; a limiter whose policy was never read is refused."""
    sql("outage", "INSERT INTO rl_policies VALUES ('outage_policy', 0.001, 2) ON CONFLICT (limiter) "
                  "DO UPDATE SET rate = 0.001, burst = 2")
    lim = make_limiter("outage", backoff=0.5, deadline=PATIENT)
    key = fresh()
    assert lim.take("outage_policy", key).source == Source.DATABASE
    server.stop()
    got = [lim.take("outage_policy", key) for _ in range(3)]
    assert [(d.allowed, d.source) for d in got] == [(True, Source.FALLBACK), (False, Source.FALLBACK),
                                                    (False, Source.FALLBACK)]
    d = lim.take("never_read_policy", key)
    assert (d.allowed, d.source, d.remaining) == (False, Source.FALLBACK, 0)
    d = lim.take_all([Request("outage_policy", fresh()), Request("never_read_policy", key)])
    assert (d.allowed, d.binding) == (False, 1)
    assert lim.stats().no_policy == 2
    # take_all in memory continues from each bucket's last database answer
    server.start()


def test_take_all_in_memory_continues_from_the_database(server, make_limiter):
    lim = make_limiter("outage", backoff=0.5, deadline=PATIENT)
    a, b = fresh(), fresh()
    assert lim.take_all([("m_a", a, 0.001, 3), ("m_b", b, 0.001, 2)]).source == Source.DATABASE
    server.stop()
    d = lim.take_all([("m_a", a, 0.001, 3), ("m_b", b, 0.001, 2)])
    assert (d.allowed, d.source, d.remaining) == (True, Source.FALLBACK, 0)
    d = lim.take_all([("m_a", a, 0.001, 3), ("m_b", b, 0.001, 2)])
    assert (d.allowed, d.limiter, d.binding) == (False, "m_b", 1)
    # the denial spent nothing of m_a
    assert lim.take("m_a", a, 0.001, 3).allowed
    assert not lim.take("m_a", a, 0.001, 3).allowed


def test_bounded_keys_during_an_outage(server, make_limiter, monkeypatch):
    """max_keys 4: a key without room is refused until a bucket is full again; never more than memory holds."""
    lim = make_limiter("outage", max_keys=4, backoff=0.5)
    server.stop()
    keys = [fresh() for _ in range(10)]
    allowed = 0
    for _ in range(3):
        for k in keys:
            allowed += lim.take("outage_room", k, 0.001, 2).allowed
    assert allowed == 8
    s = lim.stats()
    assert s.keys == 4 and s.no_room > 0 and s.evictions == 0
    # full buckets make room: at 50/s, burst 1, a bucket is full again 20 ms after its take,
    # on the buckets' clock, which stands still here but where the test moves it
    clock = [_core.mono_us()]
    monkeypatch.setattr(_core, "mono_us", lambda: clock[0])
    lim2 = make_limiter("outage", max_keys=2, backoff=0.5)
    assert lim2.take("outage_room2", "a", 50, 1).allowed and lim2.take("outage_room2", "b", 50, 1).allowed
    d = lim2.take("outage_room2", "c", 50, 1)
    assert (d.allowed, d.source, d.retry_after) == (False, Source.FALLBACK, 0.02)
    clock[0] += 19999
    d = lim2.take("outage_room2", "c", 50, 1)
    assert (d.allowed, d.source, d.retry_after) == (False, Source.FALLBACK, 1e-6)
    clock[0] += 1
    assert lim2.take("outage_room2", "c", 50, 1).allowed
    assert lim2.stats().evictions == 1


def test_threads_in_memory_share_one_burst(server, make_limiter):
    lim = make_limiter("outage", backoff=30)
    server.stop()
    key = fresh()
    results = []

    def run():
        results.extend(lim.take("outage_threads", key, 0.001, 100).allowed for _ in range(1000))
    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 100 and len(results) == 8000


def test_lockout_from_the_database_is_kept_in_the_precheck_and_the_fallback(server, make_limiter, monkeypatch):
    """The database locks a key: the pre-check refuses it for the lock's remainder, the fallback keeps
    it during an outage, and the next offence within the last lockout's length is locked twice as long."""
    name = "lockout_" + fresh()[:8]
    sql("outage", "INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max) "
                  "VALUES (%s, 1.0 / 3600, 2, interval '10 minutes', 2, interval '1 hour')", (name,))
    # the lock's end passes on the limiter's clock, never the machine's
    clock = [_core.mono_us()]
    monkeypatch.setattr(_core, "mono_us", lambda: clock[0])
    lim = make_limiter("outage", backoff=0.5, deadline=PATIENT)
    key = fresh()
    assert [(d.allowed, d.source) for d in (lim.take(name, key), lim.take(name, key))] == \
        [(True, Source.DATABASE)] * 2
    assert lim.policy(name) == Policy(1 / 3600, 2, False, lockout=600.0, lockout_growth=2.0, lockout_max=3600.0)
    lock = lim.take(name, key)
    assert (lock.allowed, lock.source, lock.retry_after) == (False, Source.DATABASE, 600), "a lockout starts"
    local = lim.take(name, key)
    assert (local.allowed, local.source, local.remaining) == (False, Source.LOCAL, 0), "the pre-check refuses"
    assert 590 < local.retry_after <= 600, "the lock's remainder"
    assert lim.take(name, fresh()).source == Source.DATABASE, "another key is not locked"
    server.stop()
    clock[0] += 300_000_000
    held = lim.take(name, key)
    assert (held.allowed, held.source, held.remaining) == (False, Source.FALLBACK, 0), "the fallback keeps the lock"
    assert 290 < held.retry_after <= 300, "the lock's remainder"
    # the lock has ended, the two cells are still spent
    clock[0] += 301_000_000
    again = lim.take(name, key)
    assert (again.allowed, again.source, again.retry_after) == (False, Source.FALLBACK, 1200), "the next one, grown"
