"""Decisions through the client equal the server's, in both stores."""
import asyncio
import math
import threading
import uuid

import psycopg
import pytest

from conftest import dsn, needs_c_extension, sql, wait_for
from ratelimit_client import AsyncLimiter, Limiter, Policy, RateLimitError, Request, Source, UnknownLimiterError
from ratelimit_client import _core, _sql

# the deadline is not what these tests check: a loaded machine may take longer to connect
PATIENT = 5.0


def fresh():
    return uuid.uuid4().hex


def direct(store, query, params):
    return tuple(sql(store, query, params)[0])


def test_explicit_equals_server(store, make_limiter):
    """Each database decision of the client is rl_take's, step for step, on a twin key."""
    # a cell in 1000 s: no refill between a key and its twin
    lim = make_limiter(store, deadline=PATIENT)
    mine, twin = fresh(), fresh()
    for cost in [1, 1, 2, 0, 1, 1, 4, 1]:
        d = lim.take("equal", mine, 0.001, 4, cost)
        allowed, remaining = direct(store, "SELECT allowed, remaining FROM rl_take('equal', %s, 0.001, 4, %s)",
                                    (twin, cost))
        if d.source == Source.DATABASE:
            assert (d.allowed, d.remaining) == (allowed, remaining)
        else:
            assert d.source == Source.LOCAL and not d.allowed and not allowed
    # cost > burst: never, without writing
    d = lim.take("equal", mine, 0.001, 4, 5)
    assert (d.allowed, d.retry_after, d.source) == (False, math.inf, Source.DATABASE)


def test_interval_rounds_as_the_server(store, make_limiter):
    """T = round(1e6 / rate) halves away from zero, as C's round(): 400 000/s is T = 3 us."""
    from ratelimit_client import gcra
    lim = make_limiter(store, deadline=PATIENT)
    for rate in (400000.0, 2e6 / 3, 1e6 / 4.5):
        d = lim.take("round", fresh(), rate, 1)
        assert d.source == Source.DATABASE
        assert round(d.reset_after * 1e6) == gcra.limit_init(rate, 1, 0, 2**62)[1].interval_us


def test_policy_and_take_all_equal_server(store, make_limiter):
    lim = make_limiter(store, deadline=PATIENT)
    ip, email, ip2, email2 = fresh(), fresh(), fresh(), fresh()
    for _ in range(7):
        d = lim.take_all([Request("sign_in_ip", ip), Request("sign_in_failures", email)])
        row = direct(store, "SELECT allowed, remaining, limiter FROM rl_take_all("
                            "ARRAY['sign_in_ip', 'sign_in_failures'], ARRAY[%s, %s])", (ip2, email2))
        if d.source == Source.DATABASE:
            assert (d.allowed, d.remaining, d.limiter) == row
        assert d.binding == ["sign_in_ip", "sign_in_failures"].index(d.limiter)
    d = lim.take("sign_in_failures", email)
    assert not d.allowed and d.limiter == "sign_in_failures"
    # explicit take_all: a denial spends nothing
    k1, k2 = fresh(), fresh()
    assert lim.take_all([("a", k1, 0.001, 2, 1), ("b", k2, 0.001, 1, 1)]).allowed
    d = lim.take_all([("a", k1, 0.001, 2, 1), ("b", k2, 0.001, 1, 1)])
    assert (d.allowed, d.limiter, d.binding) == (False, "b", 1)
    assert direct(store, "SELECT remaining FROM rl_take('a', %s, 0.001, 2, 0)", (k1,))[0] == 1


def test_refund(store, make_limiter):
    lim = make_limiter(store, deadline=PATIENT)
    key = fresh()
    for _ in range(5):
        assert lim.take("sign_in_failures", key).allowed
    assert not lim.take("sign_in_failures", key).allowed
    assert lim.refund("sign_in_failures", key) is True
    assert lim.take("sign_in_failures", key).allowed
    assert lim.refund("sign_in_failures", fresh()) is False


@needs_c_extension("rl_stats counts")
def test_flood_refused_locally(store, make_limiter):
    """10 000 calls on one key at burst 10: 20 reach the database, 10 of them write."""
    lim = make_limiter(store, deadline=PATIENT)
    name = "flood_" + fresh()[:8]
    allowed = sum(lim.take(name, "k", 0.001, 10).allowed for _ in range(10000))
    assert allowed == 10
    s = lim.stats()
    assert (s.database, s.local) == (20, 9980)
    assert direct(store, "SELECT allowed, denied FROM rl_stats WHERE limiter = %s", (name,)) == (10, 10)


@needs_c_extension("CREATE EXTENSION ratelimit, in the database of its own that counts its calls")
def test_take_all_is_one_call_of_rl_take_all_detail():
    """take_all, explicit and by policy: one rl_take_all_detail call each, no peek by rl_take."""
    # a database of its own: its statistics count this test's calls only
    db = "detail_" + fresh()[:8]
    sql("table", f"CREATE DATABASE {db}")
    sql("table", "CREATE EXTENSION ratelimit", dbname=db)
    sql("table", "INSERT INTO rl_policies VALUES ('detail', 1, 100)", dbname=db)
    with Limiter(dsn("table", dbname=db), deadline=PATIENT) as lim:
        for _ in range(3):
            lim.take_all([("detail_x", "a", 1, 100), ("detail_x", "b", 1, 100)])
            lim.take_all([Request("detail", "a"), Request("detail", "b")])
        assert lim.stats().database == 6

    def calls():
        return dict(sql("table", "SELECT funcname, sum(calls)::int FROM pg_stat_user_functions "
                                 "WHERE funcname IN ('rl_take', 'rl_take_all', 'rl_take_all_detail') "
                                 "GROUP BY funcname", dbname=db))
    # a backend reports its calls when it ends or idles: wait for them
    wait_for(lambda: sum(calls().values()) >= 6, timeout=20)
    assert calls() == {"rl_take_all_detail": 6}


def test_bad_use_is_an_error(store, make_limiter):
    lim = make_limiter(store, deadline=PATIENT)
    for args, state in [((None, "k", 1, 1), "22004"), (("l", "", 1, 1), "22023"), (("l", "k", 0, 1), "22023"),
                        (("l", "k", 1, 0), "22023"), (("l", "k", 1, 1, -1), "22023"),
                        (("l", "k\udc80", 1, 1), "22021")]:
        with pytest.raises(RateLimitError) as e:
            lim.take(*args)
        assert e.value.sqlstate == state
    with pytest.raises(RateLimitError) as e:
        lim.take_all([("l", "k", 1, 1), ("l", "k", 1, 1)])
    assert (e.value.sqlstate, e.value.index) == ("22023", 1)
    with pytest.raises(UnknownLimiterError) as e:
        lim.take_all([Request("sign_in_ip", "k"), Request("no_such_policy", "k")])
    assert e.value.sqlstate == "42704"
    # the server's error is the cause, with its diagnostics
    assert isinstance(e.value.__cause__, psycopg.errors.UndefinedObject)
    assert e.value.__cause__.sqlstate == "42704"
    # the explicit form of a limiter whose policy was read: refused as the server refuses it
    with pytest.raises(RateLimitError) as e:
        lim.take("sign_in_ip", "k", 1000, 1000)
    assert e.value.sqlstate == "42501" and "sign_in_ip" in str(e.value)
    # the server's class 22 is bad use too, never an outage
    with psycopg.connect(dsn(store), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT 1 / 0")
    assert _sql.failure(e.value).kind == "bad_use"
    s = lim.stats()
    assert s.fallback == 0 and lim._core.retry_db_at == 0
    assert lim.take("l", fresh(), 1, 1).source == Source.DATABASE



def test_take_all_error_names_its_element(store, make_limiter):
    lim = make_limiter(store, deadline=PATIENT)
    with pytest.raises(UnknownLimiterError) as e:
        lim.take_all([Request("sign_in_ip", "k"), Request("no_such_policy", "k")])
    assert (e.value.sqlstate, e.value.index, e.value.limiter) == ("42704", 1, "no_such_policy")


def test_refund_without_privilege_is_bad_use(make_limiter):
    sql("table", "DO $$ BEGIN CREATE ROLE ungranted LOGIN; EXCEPTION WHEN duplicate_object THEN END $$")
    lim = Limiter(dsn("table", user="ungranted"), deadline=PATIENT)
    try:
        with pytest.raises(RateLimitError) as e:
            lim.refund("x_" + fresh(), "k")
        assert e.value.sqlstate == "42501"
        assert lim.stats().fallback == 0
    finally:
        lim.close()


def test_threads_share_one_burst(store, make_limiter):
    lim = make_limiter(store, pool_size=4, deadline=5.0)
    key = fresh()
    results = []

    def run():
        results.extend(lim.take("threads", key, 0.001, 100).allowed for _ in range(100))
    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 100 and len(results) == 800


def test_asyncio_shares_one_burst(store):
    async def main():
        async with AsyncLimiter(dsn(store), deadline=5.0) as lim:
            key = fresh()
            ds = await asyncio.gather(*[lim.take("aio", key, 0.001, 50) for _ in range(300)])
            assert sum(d.allowed for d in ds) == 50
            d = await lim.take_all([Request("sign_in_ip", key), Request("sign_in_failures", key)])
            assert d.allowed and d.source == Source.DATABASE
            assert await lim.refund("sign_in_failures", key) is True
    asyncio.run(main())


def test_bounded_keys_with_the_database_up(store, make_limiter):
    """40 keys through 8 buckets: every decision by the database, and exact."""
    lim = make_limiter(store, max_keys=8, deadline=PATIENT)
    keys = [fresh() for _ in range(40)]
    for _ in range(3):
        for k in keys:
            d = lim.take("bounded", k, 0.001, 2)
            assert d.source == Source.DATABASE
    s = lim.stats()
    assert s.keys <= 8 and s.evictions >= 32
    assert sum(direct(store, "SELECT allowed FROM rl_take('bounded', %s, 0.001, 2, 0)", (k,))[0] for k in keys) == 40
    assert all(direct(store, "SELECT remaining FROM rl_take('bounded', %s, 0.001, 2, 0)", (k,))[0] == 0 for k in keys)


def test_schema_option(store, make_limiter):
    sql(store, "CREATE SCHEMA IF NOT EXISTS \"odd \"\"schema\"")
    lim = make_limiter(store, schema="public", deadline=PATIENT)
    assert lim.take("schema", fresh(), 1, 1).source == Source.DATABASE
    lim2 = make_limiter(store, schema='odd "schema', backoff=60)
    assert lim2.take("schema", fresh(), 1, 1).source == Source.FALLBACK


def test_policy_change_reaches_the_precheck_after_policy_refresh(store, make_limiter, monkeypatch):
    name = "refresh_" + fresh()[:8]
    sql(store, "INSERT INTO rl_policies VALUES (%s, 0.001, 1)", (name,))
    try:
        # the limiter's clock stands still but where the test moves it
        clock = [_core.mono_us()]
        monkeypatch.setattr(_core, "mono_us", lambda: clock[0])
        lim = make_limiter(store, policy_refresh=0.5, deadline=PATIENT)
        key = fresh()
        # the first call reads the policies and is not pre-checked; then 2 x burst go to the database
        assert [lim.take(name, key).source for _ in range(4)] == [Source.DATABASE] * 3 + [Source.LOCAL]
        sql(store, "UPDATE rl_policies SET burst = 5 WHERE limiter = %s", (name,))
        # the copy is not read again before policy_refresh: the pre-check still refuses
        assert lim.take(name, key).source == Source.LOCAL
        clock[0] += 499999
        assert lim.take(name, key).source == Source.LOCAL
        assert lim.stats().policy_reads == 1
        clock[0] += 1
        d = lim.take(name, key)
        assert (d.allowed, d.source, lim.stats().policy_reads) == (True, Source.DATABASE, 2)
        assert lim.policy(name) == Policy(0.001, 5, False, lockout=None, lockout_growth=1.0, lockout_max=None)
    finally:
        sql(store, "DELETE FROM rl_policies WHERE limiter = %s", (name,))


@needs_c_extension("rl_stats counts")
def test_shadow_policy_never_denies(store, make_limiter):
    name = "shadow_" + fresh()[:8]
    sql(store, "INSERT INTO rl_policies VALUES (%s, 0.001, 1, true)", (name,))
    try:
        lim = make_limiter(store, deadline=PATIENT)
        ds = [lim.take(name, "k") for _ in range(6)]
        assert all(d.allowed and d.source == Source.DATABASE for d in ds)
        assert direct(store, "SELECT shadow_denied FROM rl_stats WHERE limiter = %s", (name,))[0] == 5
    finally:
        sql(store, "DELETE FROM rl_policies WHERE limiter = %s", (name,))
