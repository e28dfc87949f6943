"""The limiter for asyncio: psycopg 3's AsyncConnection, each wait bounded by
the call's deadline.  One AsyncLimiter per event loop."""

import asyncio
import logging
import time
from typing import Any, Iterable, Optional

import psycopg
from psycopg import pq

from . import _cancel, _core, _rate, _sql
from ._core import Decision, Policy, Request, RequestLike, Stats
from ._rate import RateLike
from .client import _stale


class _AsyncPool:
    """At most size connections; a caller without an idle one connects, within its deadline."""

    def __init__(self, conninfo, size):
        self.conninfo = conninfo
        self.kwargs = _sql.connect_kwargs(conninfo)
        self.size = size
        self.idle = []
        self.taken = 0
        self.waiters = []   # futures of callers waiting for a slot
        self.closed = False

    async def acquire(self, deadline):
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
                return False
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except asyncio.TimeoutError:
                pass
            finally:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)

    def _wake(self):
        while self.waiters:
            waiter = self.waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    async def connect(self, deadline):
        try:
            return await asyncio.wait_for(
                psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs),
                max(0.0, deadline - time.monotonic()))
        except BaseException:
            self.taken -= 1
            self._wake()
            raise

    def release(self, conn, keep, in_flight=False):
        if keep and not self.closed:
            self.idle.append(conn)
        else:
            self.taken -= 1
            _cancel.discard(conn.pgconn, in_flight and not keep)
        self._wake()

    def abandon(self, conn, task):
        """Free the slot of conn, whose query task outlived its deadline, at once.
        The task is not cancelled: psycopg 3.2 and later answer a cancelled query by
        waiting for the server to end it, which a frozen server never does.  The
        query is cancelled on a thread, and conn closed once the task lets go of it."""
        self.taken -= 1
        self._wake()
        _cancel.cancel(conn.pgconn)

        def close(task):
            if not task.cancelled():
                task.exception()    # retrieved: it is the abandoned query's
            conn.pgconn.finish()
        task.add_done_callback(close)

    def drop_idle(self):
        for conn in self.idle:
            conn.pgconn.finish()
        self.taken -= len(self.idle)
        self.idle.clear()
        self._wake()

    def close(self):
        self.closed = True
        self.drop_idle()


class AsyncLimiter:
    """Limiter (ratelimit_client.Limiter) for asyncio: the same options, calls
    and decisions, awaited.  Its in-memory state is shared with no other
    limiter; use it from one event loop."""

    def __init__(self, conninfo: str = "", *, schema: Optional[str] = None, deadline: float = 0.25,
                 backoff: float = 1.0, pool_size: int = 4, max_keys: int = 100000,
                 policy_refresh: float = 10.0, warning_interval: float = 60.0,
                 logger: Optional[logging.Logger] = None) -> None:
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError("pool_size must be an int of at least 1")
        self._core = _core.Core(deadline, backoff, max_keys, policy_refresh, warning_interval, logger)
        self._queries = _sql.Queries(schema)
        self._pool = _AsyncPool(conninfo, pool_size)

    async def take(self, limiter: str, key: str, *positional: Any, rate: Optional[RateLike] = None,
                   burst: Optional[int] = None, cost: int = 1) -> Decision:
        """As Limiter.take."""
        r = _core.call_request(limiter, key, positional, rate, burst, cost)
        kind = "take" if r.rate is not None or r.burst is not None else "policy"
        return await self._decide(kind, self._core.items(kind, [r]))

    async def take_all(self, requests: Iterable[RequestLike]) -> Decision:
        """As Limiter.take_all."""
        kind, items = self._core.take_all_items(requests)
        return await self._decide(kind, items)

    async def refund(self, limiter: str, key: str, *positional: Any, cost: int = 1) -> bool:
        """As Limiter.refund."""
        cost = _rate.legacy(positional, ("cost",), {"cost": cost})["cost"]
        item = self._core.items("policy", [Request(limiter, key, None, None, cost)])[0]
        result, plan = self._core.refund_begin(item)
        if plan is None:
            return result
        return self._core.refund_finish(plan, await self._db(plan))

    def policy(self, limiter: str) -> Optional[Policy]:
        """The policy last read for limiter (a Policy), or None."""
        p = self._core.policies.get(limiter)
        return None if p is None else p.public()

    def stats(self) -> Stats:
        return self._core.stats()

    async def close(self) -> None:
        """Close the connections, without waiting for the network."""
        self._pool.close()

    async def __aenter__(self) -> "AsyncLimiter":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _decide(self, kind, items):
        plan = self._core.begin(kind, items)
        if isinstance(plan, _core.Decision):
            return plan
        return self._core.finish(plan, await self._db(plan))

    async def _run(self, conn, plan, query, params, read):
        if plan.read_policies:
            read.append(await (await conn.execute(self._queries.policies)).fetchall())
        return await (await conn.execute(query, params)).fetchone()

    async def _db(self, plan):
        deadline = plan.deadline
        query, params = self._queries.statement(plan)
        second_try = False
        while True:
            conn = await self._pool.acquire(deadline)
            if conn is False:
                return _core.Outcome(_core.BUSY, f"no free connection within {self._core.deadline_ms} ms "
                                                 f"(pool_size {self._pool.size})")
            reused = conn is not None
            if conn is None:
                try:
                    conn = await self._pool.connect(deadline)
                except asyncio.TimeoutError:
                    return _core.Outcome(_core.TIMEOUT, f"could not connect within {self._core.deadline_ms} ms")
                except psycopg.Error as e:
                    return _core.Outcome(_core.ERROR, _sql.first_line(e))
            read = []
            task = asyncio.ensure_future(self._run(conn, plan, query, params, read))
            try:
                done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
                if not done:
                    self._pool.abandon(conn, task)
                    return _core.Outcome(_core.TIMEOUT, f"no answer within {self._core.deadline_ms} ms")
                row = task.result()
            except psycopg.Error as e:
                dead = conn.pgconn.status != pq.ConnStatus.OK
                self._pool.release(conn, not dead and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE)
                if dead and reused and not second_try:
                    self._pool.drop_idle()
                    second_try = True
                    continue
                return _sql.failure(e, read[0] if read else None)
            except BaseException:
                # the caller was cancelled mid-query: the connection may still run it
                if task.done():
                    self._pool.release(conn, False, in_flight=True)
                else:
                    self._pool.abandon(conn, task)
                raise
            self._pool.release(conn, True)
            return _sql.answer(plan, row, read[0] if read else None)
