"""Closing a connection whose query may still run: cancel first, on a thread.

libpq's PQcancel (psycopg's PGcancel.cancel) has no timeout: where the
cancel request is lost (a network that holds packets, a proxy that never
answers) it waits forever.  Nor may the connection be closed first:
PgBouncer forgets a client's cancel key when the client goes.  So the
connection goes to a daemon thread of its own, which cancels and then
closes it, and its pool slot is free at once: a lost cancel costs one
blocked thread and one socket, never a decision or the pool.  Past
MAX_CANCELS in progress in the process (they are being lost), the query is
not cancelled: the connection is closed, and the server finishes the query
and then finds it gone.
"""

import threading

MAX_CANCELS = 64
_lock = threading.Lock()
_running = 0


def _cancel_then(canceller, pgconn, close):
    global _running
    try:
        canceller.cancel()
    except Exception:
        pass    # a failed cancel is fine: closing ends the session anyway
    finally:
        if close:
            pgconn.finish()
        with _lock:
            _running -= 1


def _start(pgconn, close):
    """Cancel pgconn's query on a daemon thread, then close pgconn if close;
    False when it could not start (MAX_CANCELS in progress, no thread)."""
    global _running
    with _lock:
        start = _running < MAX_CANCELS
        if start:
            _running += 1
    if not start:
        return False
    try:
        # made here, where the connection is used, not on the thread
        canceller = pgconn.get_cancel()
        threading.Thread(target=_cancel_then, args=(canceller, pgconn, close), daemon=True,
                         name="ratelimit-cancel").start()
        return True
    except Exception:
        with _lock:
            _running -= 1
        return False


def discard(pgconn, in_flight):
    """Close pgconn (a psycopg.pq.PGconn) without waiting for the network."""
    if not (in_flight and _start(pgconn, True)):
        pgconn.finish()


def cancel(pgconn):
    """Cancel pgconn's query without waiting for the network; pgconn stays open."""
    _start(pgconn, False)


def running():
    with _lock:
        return _running
