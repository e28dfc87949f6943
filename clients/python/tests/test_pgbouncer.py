"""PgBouncer in transaction mode: 4 client connections over 2 server connections decide exactly."""
import threading
import time
import uuid

import psycopg
import pytest

from conftest import dsn, sql, wait_for
from ratelimit_client import Limiter, Request, Source


def test_transaction_pooling_decides_exactly():
    lim = Limiter(dsn("bouncer"), pool_size=4, deadline=5.0)
    try:
        key = uuid.uuid4().hex
        results = []

        def run():
            for _ in range(50):
                d = lim.take("bouncer", key, 0.001, 10)
                assert d.source in (Source.DATABASE, Source.LOCAL), lim._core.failure
                results.append(d.allowed)
                # by policy and over two limits too, many times per server connection
                assert lim.take_all([Request("sign_in_ip", uuid.uuid4().hex),
                                     Request("sign_in_failures", key)]).source != Source.FALLBACK
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(results) == 10 and len(results) == 200
        assert lim.stats().fallback == 0
    finally:
        lim.close()


@pytest.mark.parametrize("via", ["bouncer", "table"])
def test_stall_is_cancelled(via):
    """A row lock held elsewhere: the call returns at its deadline and its query is cancelled,
    through PgBouncer and directly (closing alone would leave the backend waiting for the lock)."""
    key = uuid.uuid4().hex
    lim = Limiter(dsn(via), backoff=0.3)
    holder = psycopg.connect(dsn("table"))
    try:
        holder.execute("SET ratelimit.in_transaction = allow")
        holder.execute("SELECT rl_take('bouncer_stall', %s, 1, 10)", (key,))   # the row stays locked
        start = time.monotonic()
        d = lim.take("bouncer_stall", key, 1, 10)
        assert time.monotonic() - start < 0.5
        assert d.source == Source.FALLBACK and lim.stats().fallback_timeout == 1

        def waiting():
            return sql("table", "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                " AND query LIKE '%%rl_take%%'")[0][0]
        assert wait_for(lambda: waiting() == 0, 5)
    finally:
        holder.rollback()
        holder.close()
        lim.close()
