"""A statement on a psycopg.pq.PGconn (psycopg's documented libpq layer) that
waits on the server no later than a deadline.

psycopg's sync Connection blocks until the server answers; here the
connection is non-blocking and every wait for its socket is a selectors
select() bounded by what is left of the deadline, so a frozen server costs
the deadline, not the call.  Values go as text and come back as text,
decoded by the column's type.
"""

import selectors
import time

import psycopg
from psycopg import pq


class Deadline(Exception):
    """The decision's deadline passed while waiting on the server."""


class ServerError(Exception):
    """The server refused the statement: error is psycopg's exception of its
    SQLSTATE, fields (sqlstate, primary message, context) its diagnostics."""

    def __init__(self, error, fields):
        super().__init__(str(error))
        self.error = error
        self.fields = fields


def _float_array(text):
    inner = text[1:-1]
    return [None if v == "NULL" else float(v) for v in inner.split(",")] if inner else []


# by type OID: bool, int8, int2, int4, text, float4, float8, varchar, numeric, float8[]
_LOADERS = {16: lambda t: t == "t", 20: int, 21: int, 23: int, 25: str, 700: float, 701: float, 1043: str,
            1700: float, 1022: _float_array}


def _element(value):
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def encode(value):
    """A parameter as text: a list is an array literal."""
    if value is None:
        return None
    if isinstance(value, list):
        return ("{" + ",".join(_element(v) for v in value) + "}").encode("utf-8")
    return str(value).encode("utf-8")


def _wait(selector, fd, events, deadline):
    """The events ready on fd, waiting at most until deadline."""
    selector.modify(fd, events)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Deadline()
        ready = selector.select(left)
        if ready:
            return ready[0][1]


def _rows(result):
    loaders = [_LOADERS.get(result.ftype(c), str) for c in range(result.nfields)]
    rows = []
    for r in range(result.ntuples):
        row = []
        for c, load in enumerate(loaders):
            value = result.get_value(r, c)
            row.append(None if value is None else load(value.decode("utf-8")))
        rows.append(tuple(row))
    return rows


def _server_error(result):
    def field(name):
        value = result.error_field(name)
        return value.decode("utf-8", "replace") if value is not None else None

    state = field(pq.DiagnosticField.SQLSTATE)
    primary = field(pq.DiagnosticField.MESSAGE_PRIMARY) or result.error_message.decode("utf-8", "replace")
    try:
        cls = psycopg.errors.lookup(state)
    except KeyError:
        cls = psycopg.DatabaseError
    return ServerError(cls(primary), (state, primary, field(pq.DiagnosticField.CONTEXT)))


def execute(pgconn, query, params, deadline):
    """The rows of query (bytes with $1, $2, ...) on params (encode()d), waiting on the
    server until deadline (time.monotonic()); Deadline, ServerError or psycopg.Error."""
    pgconn.nonblocking = 1
    pgconn.send_query_params(query, params)
    fd = pgconn.socket
    both = selectors.EVENT_READ | selectors.EVENT_WRITE
    with selectors.DefaultSelector() as selector:
        selector.register(fd, both)
        # what the socket did not take yet; the server's answers meanwhile are read
        while pgconn.flush():
            if _wait(selector, fd, both, deadline) & selectors.EVENT_READ:
                pgconn.consume_input()
        results = []
        while True:
            while pgconn.is_busy():
                _wait(selector, fd, selectors.EVENT_READ, deadline)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                break
            results.append(result)
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise _server_error(result)
    if not results or results[-1].status != pq.ExecStatus.TUPLES_OK:
        raise psycopg.OperationalError("the server answered no rows")
    return _rows(results[-1])
