"""The limiter for threads: psycopg 3 connections, each statement run by _pq within its deadline."""

import logging
import selectors
import threading
import time
from typing import Any, Iterable, Optional

import psycopg
from psycopg import pq

from . import _cancel, _core, _pq, _rate, _sql
from ._core import Decision, Policy, Request, RequestLike, Stats
from ._rate import RateLike


def _execute(conn, query, params, deadline):
    """The rows of a statement (psycopg's placeholders) on conn, by deadline."""
    text, names = _sql.numbered(query)
    return _pq.execute(conn.pgconn, text, [_pq.encode(params[n]) for n in names], deadline)


def _stale(pgconn):
    """True when an idle connection is closed: the server went away (a restart)."""
    if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return True
    try:
        # an idle connection has nothing to read but a server's last words
        with selectors.DefaultSelector() as selector:
            selector.register(pgconn.socket, selectors.EVENT_READ)
            for _ in range(3):
                if not selector.select(0):
                    break
                pgconn.consume_input()
    except (psycopg.Error, OSError):
        return True
    return pgconn.status != pq.ConnStatus.OK


class _Busy(Exception):
    pass


class _Pool:
    """At most size connections; a caller without an idle one connects, within its deadline.

    Connecting runs on a thread of its own, so that the caller can stop
    waiting at its deadline; a connection finished late joins the idle ones.
    A timed-out connection leaves its slot at once (see _cancel).
    """

    def __init__(self, conninfo, size):
        self.conninfo = conninfo
        self.kwargs = _sql.connect_kwargs(conninfo)
        self.size = size
        self.cond = threading.Condition()
        self.idle = []
        self.taken = 0      # slots: idle, busy or connecting
        self.closed = False

    def acquire(self, deadline):
        """An idle connection, or None: the caller has a slot and connects."""
        with self.cond:
            while True:
                while self.idle:
                    conn = self.idle.pop()
                    if not _stale(conn.pgconn):
                        return conn
                    self.taken -= 1
                    conn.pgconn.finish()
                if self.taken < self.size:
                    self.taken += 1
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Busy()
                self.cond.wait(left)

    def connect(self, deadline):
        box = {}

        def run():
            try:
                conn = psycopg.Connection.connect(self.conninfo, **self.kwargs)
            except Exception as e:
                conn, error = None, e
            else:
                error = None
            with self.cond:
                if box.get("abandoned"):
                    if conn is not None and not self.closed:
                        self.idle.append(conn)
                    else:
                        self.taken -= 1
                        if conn is not None:
                            conn.pgconn.finish()
                    self.cond.notify_all()
                else:
                    box["done"] = (conn, error)
                    self.cond.notify_all()

        threading.Thread(target=run, daemon=True, name="ratelimit-connect").start()
        with self.cond:
            while "done" not in box:
                left = deadline - time.monotonic()
                if left <= 0:
                    box["abandoned"] = True
                    raise _pq.Deadline()
                self.cond.wait(left)
            conn, error = box["done"]
            if error is not None:
                self.taken -= 1
                self.cond.notify_all()
                raise error
            return conn

    def release(self, conn, keep, in_flight=False):
        """Back to the idle ones, or closed (cancelled first when a query may run)."""
        if not keep:
            _cancel.discard(conn.pgconn, in_flight)
        with self.cond:
            if keep and not self.closed:
                self.idle.append(conn)
            else:
                self.taken -= 1
                if keep:
                    conn.pgconn.finish()
            self.cond.notify_all()

    def drop_idle(self):
        """A broken connection takes the idle ones with it: they lead to the same server."""
        with self.cond:
            for conn in self.idle:
                conn.pgconn.finish()
            self.taken -= len(self.idle)
            self.idle.clear()
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
        self.drop_idle()


class Limiter:
    """Rate-limit decisions by the database, with a local pre-check, a deadline,
    and a per-process fallback at the same limit while the database fails.

    conninfo is a libpq connection string or URI (psycopg's): give the host as
    an address or a socket directory, as a name is resolved before the deadline
    applies.  It connects lazily: an application starts while the database is
    down.  One Limiter serves all the threads of a process; make it after fork.
    """

    def __init__(self, conninfo: str = "", *, schema: Optional[str] = None, deadline: float = 0.25,
                 backoff: float = 1.0, pool_size: int = 4, max_keys: int = 100000,
                 policy_refresh: float = 10.0, warning_interval: float = 60.0,
                 logger: Optional[logging.Logger] = None) -> None:
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError("pool_size must be an int of at least 1")
        self._core = _core.Core(deadline, backoff, max_keys, policy_refresh, warning_interval, logger)
        self._queries = _sql.Queries(schema)
        self._pool = _Pool(conninfo, pool_size)

    def take(self, limiter: str, key: str, *positional: Any, rate: Optional[RateLike] = None,
             burst: Optional[int] = None, cost: int = 1) -> Decision:
        """Take cost from the bucket of (limiter, key): at rate ("5/minute", a
        Rate, or per second with burst), as rl_take(limiter, key, rate, burst,
        cost), or without them by the limiter's policy, as rl_take(limiter, key,
        cost).  take(limiter, key, rate, burst, cost) by position is the 1.x form."""
        r = _core.call_request(limiter, key, positional, rate, burst, cost)
        kind = "take" if r.rate is not None or r.burst is not None else "policy"
        return self._decide(kind, self._core.items(kind, [r]))

    def take_all(self, requests: Iterable[RequestLike]) -> Decision:
        """Decide 1 to 16 Requests (or (limiter, key[, rate, burst[, cost]]) tuples), all
        or nothing, as rl_take_all: every one explicit, or every one by policy."""
        kind, items = self._core.take_all_items(requests)
        return self._decide(kind, items)

    def refund(self, limiter: str, key: str, *positional: Any, cost: int = 1) -> bool:
        """Give cost back to the bucket of (limiter, key), as rl_refund; true when
        it changed a live bucket.  During an outage, the bucket in memory."""
        cost = _rate.legacy(positional, ("cost",), {"cost": cost})["cost"]
        item = self._core.items("policy", [Request(limiter, key, None, None, cost)])[0]
        result, plan = self._core.refund_begin(item)
        if plan is None:
            return result
        return self._core.refund_finish(plan, self._db(plan))

    def policy(self, limiter: str) -> Optional[Policy]:
        """The policy last read for limiter (a Policy), or None."""
        p = self._core.policies.get(limiter)
        return None if p is None else p.public()

    def stats(self) -> Stats:
        """The counters (a Stats), at any time."""
        return self._core.stats()

    def close(self) -> None:
        """Close the connections, without waiting for the network."""
        self._pool.close()

    def __enter__(self) -> "Limiter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _decide(self, kind, items):
        plan = self._core.begin(kind, items)
        if isinstance(plan, _core.Decision):
            return plan
        return self._core.finish(plan, self._db(plan))

    def _db(self, plan):
        """Run the plan's statement on a pooled connection within its deadline."""
        deadline = plan.deadline
        query, params = self._queries.statement(plan)
        second_try = False
        while True:
            try:
                conn = self._pool.acquire(deadline)
            except _Busy:
                return _core.Outcome(_core.BUSY, f"no free connection within {self._core.deadline_ms} ms "
                                                 f"(pool_size {self._pool.size})")
            reused = conn is not None
            if conn is None:
                try:
                    conn = self._pool.connect(deadline)
                except _pq.Deadline:
                    return _core.Outcome(_core.TIMEOUT, f"could not connect within {self._core.deadline_ms} ms")
                except psycopg.Error as e:
                    return _core.Outcome(_core.ERROR, _sql.first_line(e))
            policies = None
            try:
                if plan.read_policies:
                    policies = _execute(conn, self._queries.policies, {}, deadline)
                rows = _execute(conn, query, params, deadline)
            except _pq.Deadline:
                self._pool.release(conn, False, in_flight=True)
                return _core.Outcome(_core.TIMEOUT, f"no answer within {self._core.deadline_ms} ms")
            except (psycopg.Error, _pq.ServerError) as e:
                dead = conn.pgconn.status != pq.ConnStatus.OK
                self._pool.release(conn, not dead and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE)
                if dead and reused and not second_try:
                    # a pooled connection the server closed (a restart): the
                    # others are as stale; the server may be back, try once more
                    self._pool.drop_idle()
                    second_try = True
                    continue
                if isinstance(e, _pq.ServerError):
                    return _sql.failure(e.error, policies, e.fields)
                return _sql.failure(e, policies)
            self._pool.release(conn, True)
            row = rows[0] if rows else None
            return _sql.answer(plan, row, policies)
