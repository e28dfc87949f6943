"""The pre-check, warnings and counters, on a client whose database never answers."""
import logging
import socket
import time
import uuid

from ratelimit_client import Limiter, Source, _core


def test_within_its_limit_never_precheck_refused(make_limiter):
    """A caller within its limit (its whole burst at once, then a refill) never fills the pre-check."""
    # a generous deadline: the database decides every call
    lim = make_limiter("table", deadline=5.0)
    key = uuid.uuid4().hex
    for _ in range(5):
        for _ in range(4):
            d = lim.take("steady", key, 10, 4)
            assert d.source == Source.DATABASE and d.allowed
        time.sleep(0.45)
    assert lim.stats().local == 0


def test_local_refusal_reports_the_database(make_limiter):
    lim = make_limiter("table", deadline=5.0)
    key = uuid.uuid4().hex
    ds = [lim.take("report", key, 0.01, 2) for _ in range(5)]
    assert [d.source for d in ds] == [Source.DATABASE] * 4 + [Source.LOCAL]
    # the database's last answer, carried forward: 2 cells of 100 s missing
    assert ds[4].remaining == 0 and 199 < ds[4].reset_after <= 200 and 99 < ds[4].retry_after <= 100


def refused_dsn():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"host=127.0.0.1 port={port} dbname=postgres user=postgres sslmode=disable"


def test_warnings_are_bounded(caplog, monkeypatch):
    """2 000 limiters fall back, three calls each: 1 024 named once and one summary line per interval."""
    # the limiter's clock stands still but where the test moves it
    clock = [_core.mono_us()]
    monkeypatch.setattr(_core, "mono_us", lambda: clock[0])
    lim = Limiter(refused_dsn(), backoff=600, warning_interval=4)
    caplog.set_level(logging.WARNING, logger="ratelimit_client")
    for _ in range(3):
        for i in range(2000):
            lim.take(f"w{i}", "k", 1, 1)
    logged = [r for r in caplog.records if r.name == "ratelimit_client"]
    records = [r.getMessage() for r in logged]
    named = [m for m in records if m.startswith('limiter "')]
    assert len(named) == 1024 and len(set(named)) == 1024
    assert len(records) == 1025 and records[-1].startswith("more than 1024 limiters")
    # the fields of each line, for a structured log
    assert [(r.limiter, r.reason) for r in logged[:2]] == [("w0", "error"), ("w1", "error")]
    assert logged[-1].limiter is None and logged[-1].reason == "error" and logged[0].detail in records[0]
    clock[0] += 3999999
    caplog.clear()
    lim.take("w0", "k", 1, 1)
    lim.take("w1999", "k", 1, 1)
    assert caplog.records == []
    clock[0] += 1
    caplog.clear()
    for i in range(2000):
        lim.take(f"w{i}", "k", 1, 1)
    records = [r.getMessage() for r in caplog.records if r.name == "ratelimit_client"]
    assert len(records) == 1025
    s = lim.stats()
    assert s.fallback == 8002 and s.fallback_error == 8002 and s.database == 0
    lim.close()


def test_options_are_checked():
    import pytest
    for bad in [dict(deadline=0), dict(backoff=-1), dict(pool_size=0), dict(max_keys=0), dict(schema="")]:
        with pytest.raises(ValueError):
            Limiter("", **bad)
