"""The SQL of each call, its parameters, and what an error means.

Every statement is unnamed (prepare_threshold=None on the connections):
nothing outlives its transaction, so PgBouncer's transaction mode works.
"""

import functools
import re

import psycopg

from . import _core

_DECISION = "SELECT allowed, remaining, retry_after, reset_after FROM "
# rl_take_all_detail (ratelimit 1.2) answers rl_take_all's columns and each
# request's own decision: its reset_after, in the order of the requests, lets
# an outage continue from every bucket's shared fill level
_ALL = ("SELECT a.allowed, a.remaining, a.retry_after, a.reset_after, a.limiter, "
        "ARRAY(SELECT r.reset_after FROM unnest(a.requests) WITH ORDINALITY AS r ORDER BY r.ordinality) "
        "FROM {take_all}({args}) AS a")

_ELEMENT = re.compile(r"element (\d+)")
_NAMED = re.compile(r"%\((\w+)\)s")


def _interval_us(text):
    """An interval (as text) in microseconds, counted as the server counts a
    policy's lockout: a month is 30 days (extract(epoch) counts a year as 365.25)."""
    return ("(SELECT ((extract(year FROM i) * 12 + extract(month FROM i)) * 30 + extract(day FROM i)) * 86400000000"
            " + extract(hour FROM i) * 3600000000 + extract(minute FROM i) * 60000000 + extract(microseconds FROM i)"
            f" FROM (VALUES (CAST({text} AS interval))) AS v(i))::int8")


class Queries:
    """The statements, as plain text: psycopg parses each once and keeps it."""

    def __init__(self, schema=None):
        if schema is not None and (not isinstance(schema, str) or schema == "" or "\x00" in schema):
            raise ValueError("schema must be a non-empty str or None")
        # the schema quoted as an identifier, as quote_ident does
        prefix = '"' + schema.replace('"', '""') + '".' if schema else ""

        def f(name):
            return prefix + name

        self.take = _DECISION + f("rl_take") + "(%(l)s::text, %(k)s::text, %(r)s::float8, %(b)s::int4, %(c)s::int4)"
        self.policy = _DECISION + f("rl_take") + "(%(l)s::text, %(k)s::text, %(c)s::int4)"
        self.all = _ALL.format(take_all=f("rl_take_all_detail"),
                               args="%(l)s::text[], %(k)s::text[], %(r)s::float8[], %(b)s::int4[], %(c)s::int4[]")
        self.all_policy = _ALL.format(take_all=f("rl_take_all_detail"), args="%(l)s::text[], %(k)s::text[], %(c)s::int4[]")
        self.refund = "SELECT " + f("rl_refund") + "(%(l)s::text, %(k)s::text, %(c)s::int4)"
        # to_jsonb leaves out the lockout columns of a database still at 1.2:
        # they read as no lockout
        self.policies = ("SELECT p.limiter, p.rate, p.burst, p.shadow, " + _interval_us("j->>'lockout'")
                         + ", (j->>'lockout_growth')::float8, " + _interval_us("j->>'lockout_max'")
                         + " FROM " + f("rl_policies") + " AS p CROSS JOIN LATERAL to_jsonb(p) AS j")

    def statement(self, plan):
        """The query and parameters of a Plan."""
        items = plan.items
        if plan.kind in ("take", "policy", "refund"):
            it = items[0]
            params = {"l": it.limiter, "k": it.key, "c": it.cost}
            if plan.kind == "take":
                params.update(r=it.rate, b=it.burst)
            return getattr(self, plan.kind), params
        params = {"l": [it.limiter for it in items], "k": [it.key for it in items],
                  "c": [it.cost for it in items]}
        if plan.kind == "all":
            params.update(r=[it.rate for it in items], b=[it.burst for it in items])
        return getattr(self, plan.kind), params


@functools.lru_cache(maxsize=None)
def numbered(query):
    """query for libpq: $1, $2, ... for its %(name)s placeholders, and the names in order."""
    names = _NAMED.findall(query)
    for i, name in enumerate(names):
        query = query.replace(f"%({name})s", f"${i + 1}", 1)
    return query.encode("utf-8"), tuple(names)


def answer(plan, row, policies):
    """The Outcome of the rows the database answered."""
    if plan.kind == "refund":
        return _core.Outcome(_core.OK, row=row, policies=policies)
    if (row is None or row[0] is None or row[1] is None or row[3] is None
            or (plan.kind.startswith("all") and (row[4] is None or row[5] is None
                                                  or len(row[5]) != len(plan.items)))):
        return _core.Outcome(_core.ERROR, f"rl_take answered something that is not a decision: {row!r}",
                             policies=policies)
    resets = list(row[5]) if plan.kind.startswith("all") else None
    return _core.Outcome(_core.OK, row=tuple(row), resets=resets, policies=policies)


def first_line(error):
    text = str(error).strip().split("\n")[0]
    return text or type(error).__name__


def failure(error, policies=None, fields=None):
    """The Outcome of a psycopg error: bad use (a retry cannot fix it) or an outage;
    with the rows of rl_policies when they were read before it.  fields are the
    server's (sqlstate, primary message, context), by default error's diag."""
    if fields is None:
        diag = getattr(error, "diag", None)
        fields = (getattr(error, "sqlstate", None), diag.message_primary if diag is not None else None,
                  diag.context if diag is not None else None)
    out = _failure(error, *fields)
    out.policies = policies
    out.error = error
    return out


def _failure(error, state, primary, context):
    primary = primary or first_line(error)
    if state == "42704" or state == "42501" or (state or "").startswith("22"):
        m = _ELEMENT.search(context or "")
        return _core.Outcome(_core.UNKNOWN if state == "42704" else _core.BAD_USE, primary,
                             sqlstate=state, index=int(m.group(1)) - 1 if m else 0)
    if state:
        return _core.Outcome(_core.ERROR, f"{primary} (SQLSTATE {state})")
    return _core.Outcome(_core.ERROR, primary)


def connect_kwargs(conninfo):
    """Connection settings: autocommit, no prepared statements, UTF-8, a connect timeout."""
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    kwargs = {"autocommit": True, "prepare_threshold": None, "client_encoding": "UTF8"}
    if "application_name" not in given:
        kwargs["application_name"] = "ratelimit_client"
    if "connect_timeout" not in given:
        # a connection attempt in the background ends by itself
        kwargs["connect_timeout"] = 10
    return kwargs
