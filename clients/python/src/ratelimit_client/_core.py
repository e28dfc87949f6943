"""What the sync and asyncio limiters share: the checks, the pre-check, the
in-memory limiter, the backoff, warnings and counters, without any I/O.

A call runs in three steps: begin() decides locally or says which database
call to make, the limiter makes it within the deadline (its own I/O), and
finish() takes the outcome.  Both steps run under one threading.Lock, held
for microseconds and never during I/O or logging, so one limiter serves all
threads (and an event loop: nothing awaits under the lock).
"""

import collections
import enum
import hashlib
import heapq
import itertools
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Optional, Union

from . import _rate, gcra

if TYPE_CHECKING:
    from ._rate import Rate

# 2000-01-01 (PostgreSQL's epoch) in Unix microseconds, and the last
# microsecond a timestamptz holds: the limits are checked as rl_take checks them
PG_EPOCH_US = 946684800000000
PG_MAX_TIME_US = 9223371331200000000 - 1
INT32_MAX = 2**31 - 1
# limiters whose last warning time is remembered
MAX_WARNED_LIMITERS = 1024

log = logging.getLogger("ratelimit_client")


class Source(str, enum.Enum):
    """Who made a decision."""

    DATABASE = "database"   # rl_take answered
    LOCAL = "local"         # the pre-check refused, no round trip
    FALLBACK = "fallback"   # the in-memory limiter, during an outage


@dataclass(frozen=True)
class Decision:
    """A decision, as rl_take (and, with limiter and binding, rl_take_all) answers it.

    retry_after is 0 when allowed and math.inf where rl_take answers NULL
    (cost > burst: never).  limiter is the binding limiter of a take_all
    (requests[binding].limiter), or the one limiter of a take.  A Decision
    is true when allowed.
    """

    allowed: bool
    remaining: int
    retry_after: float
    reset_after: float
    source: Source
    limiter: str
    binding: int = 0

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True)
class Stats:
    """Counters since the limiter was made (decisions by source, fallbacks by reason)."""

    database: int
    local: int
    fallback: int
    fallback_timeout: int
    fallback_error: int
    no_room: int        # fallbacks refused: no bucket for the key and none full again
    no_policy: int      # fallbacks refused: the limiter's policy was never read
    policy_reads: int
    evictions: int      # keys forgotten to stay within max_keys
    keys: int           # keys in memory now


class Policy(NamedTuple):
    """A row of rl_policies as last read; lockout and lockout_max in seconds
    (lockout None: no lockout; lockout_max None: as lockout)."""

    rate: float
    burst: int
    shadow: bool
    lockout: Optional[float] = None
    lockout_growth: float = 1.0
    lockout_max: Optional[float] = None


class _PolicyRow(NamedTuple):
    """A row of rl_policies as the limiter keeps it: intervals in microseconds, 0 when NULL."""

    rate: float
    burst: int
    shadow: bool
    lockout_us: int
    lockout_growth: float
    lockout_max_us: int

    @classmethod
    def read(cls, row):
        return cls(float(row[1]), int(row[2]), bool(row[3]), row[4] or 0,
                   1.0 if row[5] is None else float(row[5]), row[6] or 0)

    def public(self):
        return Policy(self.rate, self.burst, self.shadow, self.lockout_us / 1e6 or None,
                      self.lockout_growth, self.lockout_max_us / 1e6 or None)


class RateLimitError(ValueError):
    """Bad use, which a retry cannot fix: never an outage, never a decision.

    sqlstate is the server's for the same call (22023, 22004, 42501, 42704,
    ...); index is the request at fault in a take_all.
    """

    def __init__(self, message: str, limiter: Optional[str] = None, sqlstate: Optional[str] = None,
                 index: int = 0) -> None:
        self.message = message
        self.limiter = limiter
        self.sqlstate = sqlstate
        self.index = index
        named = (f'limiter "{limiter}": ' if isinstance(limiter, str) and limiter
                 and f'"{limiter}"' not in message else "")
        super().__init__(f"{named}{message}" + (f" (SQLSTATE {sqlstate})" if sqlstate else ""))


class UnknownLimiterError(RateLimitError):
    """The database has no policy for the limiter (42704)."""


@dataclass(frozen=True)
class Request:
    """One request of a take_all: the explicit form with a rate (a Rate, "5/minute",
    or per second with burst), else by policy.  rate and burst read as rl_take's."""

    limiter: str
    key: str
    rate: "Union[Rate, str, float, None]" = None
    burst: Optional[int] = None
    cost: int = 1

    def __post_init__(self) -> None:
        rate, burst = _rate.resolve(self.rate, self.burst)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "burst", burst)


RequestLike = Union[Request, tuple]


def call_request(limiter, key, positional, rate, burst, cost):
    """The Request of a take: keywords, or the 1.x positional (rate, burst, cost)."""
    given = _rate.legacy(positional, ("rate", "burst", "cost"), {"rate": rate, "burst": burst, "cost": cost})
    return Request(limiter, key, given["rate"], given["burst"], given["cost"])


def mono_us():
    """Buckets and deadlines run on the monotonic clock."""
    return time.monotonic_ns() // 1000


def wall_us():
    return time.time_ns() // 1000 - PG_EPOCH_US


def _check_text(value, name, limiter):
    if value is None:
        raise RateLimitError(f"{name} must not be null", limiter, "22004")
    if not isinstance(value, str):
        raise RateLimitError(f"{name} must be a str, not {type(value).__name__}", limiter, "22023")
    if value == "":
        raise RateLimitError(f"{name} must not be empty", limiter, "22023")
    if "\x00" in value:
        raise RateLimitError(f"{name} must not contain a NUL character", limiter, "22021")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise RateLimitError(f"{name} must be valid UTF-8", limiter, "22021") from None


def _check_int(value, name, limiter, low, message):
    if isinstance(value, bool) or not isinstance(value, int):
        raise RateLimitError(f"{name} must be an int, not {type(value).__name__}", limiter, "22023")
    if value < low:
        raise RateLimitError(message, limiter, "22023")
    if value > INT32_MAX:
        raise RateLimitError(f"{name} must be at most {INT32_MAX}", limiter, "22003")


class Item:
    """One request as the limiter decides it."""

    __slots__ = ("limiter", "key", "rate", "burst", "cost", "id", "known", "shadow", "limit")

    def __init__(self, secret, limiter, key, rate, burst, cost, explicit):
        # limiter and key first, then the limit, then cost: rl_take's order
        lb = _check_text(limiter, "limiter", None)
        kb = _check_text(key, "key", limiter)
        self.limiter = limiter
        self.key = key
        self.cost = cost
        self.shadow = False
        self.known = explicit
        self.limit = None
        if explicit:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)):
                raise RateLimitError(gcra.MESSAGES[gcra.BAD_RATE], limiter, "22023")
            _check_int(burst, "burst", limiter, 1, gcra.MESSAGES[gcra.BAD_BURST])
            error, self.limit = gcra.limit_init(float(rate), burst, wall_us(), PG_MAX_TIME_US)
            if error != gcra.OK:
                raise RateLimitError(gcra.MESSAGES[error], limiter, "22023")
            rate = float(rate)
        self.rate = rate
        self.burst = burst
        _check_int(cost, "cost", limiter, 0, gcra.MESSAGES[gcra.BAD_COST])
        # a keyed hash names the entry: no key text is kept, and callers
        # cannot aim keys at one another
        self.id = hashlib.blake2b(lb + b"\x00" + kb, key=secret, digest_size=16).digest()


class _Entry:
    """One (limiter, key) in memory: the pre-check bucket and the database's last answer."""

    __slots__ = ("id", "precheck", "memory", "pinned", "full_at", "alive")

    def __init__(self, id_):
        self.id = id_
        self.precheck = None    # a gcra bucket: this process's round trips, 2 x burst
        self.memory = None      # the database's last answer, continued in an outage
        self.pinned = False     # in use by the call being decided: kept
        self.full_at = -math.inf
        self.alive = True


class _Table:
    """At most max entries: an LRU order and a heap on when entries are full again."""

    def __init__(self, max_keys):
        self.max = max_keys
        self.entries = collections.OrderedDict()
        self.heap = []          # (full_at, seq, entry); stale items are skipped
        self.seq = itertools.count()
        self.evictions = 0

    def fix(self, e):
        full = -math.inf
        for b in (e.precheck, e.memory):
            # full again once gcra_bucket_forgotten: a lockout's length is
            # kept for as long as a new offence would grow from it
            if b is not None:
                full = max(full, b[0], b[2] + b[3])
        e.full_at = math.inf if e.pinned else full
        heapq.heappush(self.heap, (e.full_at, next(self.seq), e))
        if len(self.heap) > 2 * len(self.entries) + 64:
            self.heap = [(x.full_at, next(self.seq), x) for x in self.entries.values()]
            heapq.heapify(self.heap)

    def first_full(self):
        """The entry that is full again first."""
        heap = self.heap
        while heap:
            full_at, _, e = heap[0]
            if e.alive and e.full_at == full_at:
                return e
            heapq.heappop(heap)
        return None

    def make_room(self, now, evict_live):
        """Forget an entry full again or, when evict_live, the least recently used."""
        if len(self.entries) < self.max:
            return True
        victim = self.first_full()
        if victim is None or victim.full_at > now:
            victim = next(iter(self.entries.values()))
            if not evict_live or victim.pinned:
                return False
        del self.entries[victim.id]
        victim.alive = False
        self.evictions += 1
        return True

    def get(self, id_, now, evict_live):
        """The entry of id_, most recently used now; None without room for it."""
        e = self.entries.get(id_)
        if e is not None:
            self.entries.move_to_end(id_)
            return e
        if not self.make_room(now, evict_live):
            return None
        e = self.entries[id_] = _Entry(id_)
        self.fix(e)
        return e

    def set(self, e, which, bucket):
        setattr(e, which, bucket)
        self.fix(e)

    def pin(self, e, pinned):
        e.pinned = pinned
        self.fix(e)


def _seconds_to_us(seconds, max_us):
    return max_us if seconds * 1e6 >= max_us else int(round(seconds * 1e6))


@dataclass
class Plan:
    """A database call to make: what begin() could not decide."""

    kind: str           # take, policy, all, all_policy, refund
    items: list
    read_policies: bool
    deadline: float     # time.monotonic() seconds


# outcomes of a database call
OK, BUSY, TIMEOUT, ERROR, UNKNOWN, BAD_USE = "ok", "busy", "timeout", "error", "unknown", "bad_use"


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    row: tuple = None           # the decision row (or rl_refund's answer)
    resets: list = None         # each bucket's reset_after
    policies: list = None       # rl_policies rows, when read
    sqlstate: str = None
    index: int = 0
    error: Exception = None     # the psycopg error of a BAD_USE or UNKNOWN, its cause


class Core:
    def __init__(self, deadline, backoff, max_keys, policy_refresh, warning_interval, logger):
        for name, value in (("deadline", deadline), ("backoff", backoff),
                            ("policy_refresh", policy_refresh), ("warning_interval", warning_interval)):
            if not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
                raise ValueError(f"{name} must be a number of seconds above 0")
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or not 1 <= max_keys <= 1 << 30:
            raise ValueError("max_keys must be from 1 to 1073741824")
        self.deadline = float(deadline)
        self.deadline_ms = round(deadline * 1000)
        self.backoff_us = round(backoff * 1e6)
        self.backoff_ms = round(backoff * 1000)
        self.policy_refresh_us = round(policy_refresh * 1e6)
        self.warning_interval_us = round(warning_interval * 1e6)
        self.warning_interval_ms = round(warning_interval * 1000)
        self.logger = logger or log
        self.secret = os.urandom(32)
        self.lock = threading.Lock()
        self.table = _Table(max_keys)
        self.retry_db_at = 0        # 0: healthy; else no query before then
        self.failure_reason = TIMEOUT
        self.failure = ""
        self.warned = collections.OrderedDict()    # limiter: quiet until
        self.summary_due = 0
        self.policies = {}          # limiter: _PolicyRow, as last read
        self.policies_due = 0       # read again from then; 0: at once
        self.counts = dict.fromkeys(("database", "local", "fallback", "fallback_timeout",
                                     "fallback_error", "no_room", "no_policy", "policy_reads"), 0)

    # ---- calls ----

    def take_all_items(self, requests):
        """(kind, items) of a take_all: every request explicit, or every one by policy."""
        requests = [r if isinstance(r, Request) else Request(*r) for r in requests]
        explicit = {r.rate is not None or r.burst is not None for r in requests}
        if len(explicit) > 1:
            raise RateLimitError("requests must all have rate and burst, or none", None, "22023")
        kind = "all" if explicit == {True} else "all_policy"
        return kind, self.items(kind, requests)

    def items(self, kind, requests):
        """Checked items of a call, as rl_take and rl_take_all check them."""
        explicit = kind in ("take", "all")
        if kind in ("all", "all_policy"):
            if not 1 <= len(requests) <= gcra.MAX_REQUESTS:
                raise RateLimitError("requests must have 1 to 16 elements", None, "22023")
        items = []
        for i, r in enumerate(requests):
            try:
                items.append(Item(self.secret, r.limiter, r.key, r.rate, r.burst, r.cost, explicit))
            except RateLimitError as e:
                e.index = i
                raise
        seen = set()
        for i, it in enumerate(items):
            if it.id in seen:
                raise RateLimitError("limiters and keys must not name the same pair twice",
                                     it.limiter, "22023", i)
            seen.add(it.id)
        return items

    def begin(self, kind, items):
        """A Decision made locally, or the Plan of a database call."""
        warnings = []
        deadline = time.monotonic() + self.deadline
        with self.lock:
            now = mono_us()
            read = False
            if kind in ("policy", "all_policy"):
                self._apply_policies(items)
                # this call reads them; the others meanwhile use the last read
                if now >= self.policies_due:
                    read = True
                    self.policies_due = now + self.policy_refresh_us
            else:
                self._refuse_explicit_with_policy(items)
            if self.retry_db_at and now < self.retry_db_at:
                if read:
                    self.policies_due = 0
                d = self._fallback(items, now, self.failure_reason, self.failure, warnings)
            else:
                # a due read goes to the database: the pre-check waits for its policy
                d = None if read else self._precheck(items, now)
                if d is not None:
                    self.counts["local"] += 1
                else:
                    if self.retry_db_at:
                        # after a failure, this call is the one probe of its interval
                        self.retry_db_at = now + self.backoff_us
                    return Plan(kind, items, read, deadline)
        self._warn(warnings)
        return d

    def finish(self, plan, out):
        """The decision of a Plan, from the database's Outcome or in memory."""
        warnings = []
        items = plan.items
        with self.lock:
            now = mono_us()
            if out.policies is not None:
                self.policies = {p[0]: _PolicyRow.read(p) for p in out.policies}
                self.counts["policy_reads"] += 1
                self._apply_policies(items)
            elif plan.read_policies:
                self.policies_due = 0
            if out.kind in (UNKNOWN, BAD_USE):
                # the database answered: healthy, and the caller's fault
                self.retry_db_at = 0
            elif out.kind == OK:
                self.retry_db_at = 0
                self.counts["database"] += 1
                d = self._database_answer(plan, out, now)
            else:
                # a full pool is load, not a failure of the database: no backoff
                reason = TIMEOUT if out.kind in (TIMEOUT, BUSY) else ERROR
                if out.kind != BUSY:
                    self.retry_db_at = now + self.backoff_us
                    self.failure_reason = reason
                    self.failure = out.detail
                d = self._fallback(items, now, reason, out.detail, warnings)
        if out.kind in (UNKNOWN, BAD_USE):
            i = out.index if 0 <= out.index < len(items) else 0
            cls = UnknownLimiterError if out.kind == UNKNOWN else RateLimitError
            raise cls(out.detail, items[i].limiter, out.sqlstate, i) from out.error
        self._warn(warnings)
        return d

    def _database_answer(self, plan, out, now):
        items = plan.items
        allowed, remaining, retry_after, reset_after = out.row[:4]
        resets = out.resets if out.resets is not None else [reset_after]
        # each bucket's shared fill level, for an outage that starts now
        if not all(it.known for it in items):
            # a policy made since the last read: read them again
            self.policies_due = 0
        binding = 0
        if len(out.row) > 4:
            binding = next((i for i, it in enumerate(items) if it.limiter == out.row[4]), 0)
        for i, (it, reset) in enumerate(zip(items, resets)):
            if not it.known:
                continue
            e = self.table.get(it.id, now, True)
            if e is not None:
                lock = self._lock_learned(items, i, binding, allowed, retry_after, e.memory, now)
                self.table.set(e, "memory", (now + _seconds_to_us(reset, it.limit.tolerance_us),
                                             it.limit.interval_us) + lock)
        return Decision(allowed, remaining, math.inf if retry_after is None else retry_after,
                        reset_after, Source.DATABASE, items[binding].limiter, binding)

    @staticmethod
    def _lock_learned(items, i, binding, allowed, retry_after, memory, now):
        """The lock (lock_until_us, lock_us) of items[i] in memory after the
        database's answer.  The answer has no lock_until or lock_us: under a
        lockout, a denial of a request the burst holds is always a lock (one
        that starts, or its remainder), so the key is locked for retry_after,
        known for the request of the answer (a take, or the binding request
        of a take_all when no other request shares its limiter).  A lock that
        starts lasts retry_after; a lock already kept in memory is the same
        one and keeps its length.  A key not locked: what memory holds while
        it has ended (the length the next lockout grows from), none while
        memory still had it locked (the database ended it: rl_reset)."""
        it = items[i]
        kept = (memory[2], memory[3]) if memory is not None else (0, 0)
        running = now < kept[0]
        answered = len(items) == 1 or (
            i == binding and sum(other.limiter == it.limiter for other in items) == 1)
        if it.shadow or (not allowed and not answered):
            return kept
        if (not allowed and it.limit.lockout_us > 0 and 0 < it.cost <= it.burst
                and retry_after is not None):
            remainder = round(retry_after * 1e6)
            return (now + remainder, kept[1] if running else remainder)
        return (0, 0) if running else kept

    # ---- policies ----

    def _apply_policies(self, items):
        wall = wall_us()
        for it in items:
            p = self.policies.get(it.limiter)
            it.known = False
            if p is not None:
                error, limit = gcra.limit_init(p.rate, p.burst, wall, PG_MAX_TIME_US)
                if error == gcra.OK and p.lockout_us > 0:
                    error = gcra.lockout_init(limit, p.lockout_us, p.lockout_growth,
                                              p.lockout_max_us, wall, PG_MAX_TIME_US)
                if error == gcra.OK:
                    it.known = True
                    it.rate, it.burst, it.shadow = p.rate, p.burst, p.shadow
                    it.limit = limit

    def _refuse_explicit_with_policy(self, items):
        """rl_take refuses the explicit form for a limiter with a policy (42501)."""
        for i, it in enumerate(items):
            if it.limiter in self.policies:
                raise RateLimitError("has a policy in rl_policies: call the policy form "
                                     "(no rate and burst)", it.limiter, "42501", i)

    # ---- local decisions ----

    def _precheck(self, items, now):
        """The pre-check, all or nothing over buckets of twice the burst: a refusal, or None."""
        table = self.table
        # the database's last answers carried forward in time, neither stored
        known = [it for it in items if it.known]
        buckets = []
        for it in known:
            e = table.entries.get(it.id)
            buckets.append(e.memory if e is not None else None)

        def last(spend):
            return gcra.decide_all([gcra.Request(it.limit, b, it.cost if spend else 0, it.shadow)
                                    for it, b in zip(known, buckets)], now)[0]

        if any(it.cost > 0 and not it.shadow and it.limit.lockout_us > 0 and b is not None and now < b[2]
               for it, b in zip(known, buckets)):
            # the database locked a key of the call and the lock has not
            # ended: retry_after is the lock's remainder
            take = last(True)
            binding = items.index(known[take.binding])
            return Decision(False, take.remaining, take.retry_after_us / 1e6 if take.retry_known else math.inf,
                            take.reset_after_us / 1e6, Source.LOCAL, items[binding].limiter, binding)
        wall = wall_us()
        # pinned, an entry is kept while the call makes room for its next one
        pin = len(items) > 1
        requests, entries, which = [], [], []
        for i, it in enumerate(items):
            if not it.known or it.shadow or it.cost > it.burst:
                continue
            error, limit = gcra.limit_init(it.rate, min(2 * it.burst, INT32_MAX), wall, PG_MAX_TIME_US)
            if error != gcra.OK:
                continue
            e = table.get(it.id, now, False)
            if e is None:
                continue
            if pin:
                table.pin(e, True)
            requests.append(gcra.Request(limit, e.precheck, it.cost))
            entries.append(e)
            which.append(i)
        if not requests:
            return None
        pre, decisions = gcra.decide_all(requests, now)
        for d, e, r in zip(decisions, entries, requests):
            if d.store:
                e.precheck = (d.new_tat_us, r.limit.interval_us, d.new_lock_until_us, d.new_lock_us)
            if pin:
                table.pin(e, False)
            else:
                table.fix(e)
        if pre.allowed:
            return None
        peek = last(False)
        take = last(True)
        if take.allowed or (take.retry_known and take.retry_after_us < pre.retry_after_us):
            retry = pre.retry_after_us / 1e6
        else:
            retry = take.retry_after_us / 1e6 if take.retry_known else math.inf
        binding = which[pre.binding]
        return Decision(False, peek.remaining, retry, peek.reset_after_us / 1e6,
                        Source.LOCAL, items[binding].limiter, binding)

    def _fallback(self, items, now, reason, detail, warnings):
        """Decide in memory, all or nothing; never allowed for want of a limit or of room."""
        table = self.table
        self.counts["fallback"] += 1
        self.counts["fallback_timeout" if reason == TIMEOUT else "fallback_error"] += 1
        self._warnings_due(items, now, reason, detail, warnings)
        for i, it in enumerate(items):
            if not it.known:
                # refused until the database answers again
                wait = max(0, self.retry_db_at - now) / 1e6
                self.counts["no_policy"] += 1
                return Decision(False, 0, wait, wait, Source.FALLBACK, it.limiter, i)
        pin = len(items) > 1
        entries = []
        for it in items:
            e = table.get(it.id, now, False)
            if e is None:
                break
            if pin:
                table.pin(e, True)
            entries.append(e)
        d = None
        if len(entries) == len(items):
            combined, decisions = gcra.decide_all(
                [gcra.Request(it.limit, e.memory, it.cost, it.shadow) for it, e in zip(items, entries)], now)
            for dd, e, it in zip(decisions, entries, items):
                if dd.store:
                    e.memory = (dd.new_tat_us, it.limit.interval_us, dd.new_lock_until_us, dd.new_lock_us)
            b = combined.binding
            d = Decision(combined.allowed, combined.remaining,
                         combined.retry_after_us / 1e6 if combined.retry_known else math.inf,
                         combined.reset_after_us / 1e6, Source.FALLBACK, items[b].limiter, b)
        for e in entries:
            if pin:
                table.pin(e, False)
            else:
                table.fix(e)
        if d is None:
            got = len(entries)
            room_after = (table.first_full().full_at - now) / 1e6
            self.counts["no_room"] += 1
            it = items[got]
            d = Decision(False, 0, math.inf if it.cost > it.burst else room_after, room_after,
                         Source.FALLBACK, it.limiter, got)
        return d

    # ---- refunds ----

    def refund_local(self, item, now):
        """Give cost cells back to the key's buckets in memory; true when its last answer changed."""
        e = self.table.entries.get(item.id)
        if e is None:
            return False
        changed = False
        for which in ("precheck", "memory"):
            b = getattr(e, which)
            if b is not None and b[0] > now:
                tat = max(now, b[0] - item.cost * b[1])
                # a refund never ends a lockout
                setattr(e, which, (tat, b[1], b[2], b[3]))
                changed |= which == "memory" and tat != b[0]
        self.table.fix(e)
        return changed

    def refund_begin(self, item):
        """(bool, None) decided in memory during the backoff, or (None, Plan)."""
        warnings = []
        with self.lock:
            now = mono_us()
            if self.retry_db_at and now < self.retry_db_at:
                self._warnings_due([item], now, self.failure_reason, self.failure, warnings)
                result = self.refund_local(item, now)
            else:
                if self.retry_db_at:
                    self.retry_db_at = now + self.backoff_us
                return None, Plan("refund", [item], False, time.monotonic() + self.deadline)
        self._warn(warnings)
        return result, None

    def refund_finish(self, plan, out):
        warnings = []
        item = plan.items[0]
        with self.lock:
            now = mono_us()
            if out.kind in (OK, BAD_USE, UNKNOWN):
                self.retry_db_at = 0
            if out.kind == BAD_USE or out.kind == UNKNOWN:
                error = RateLimitError(out.detail, item.limiter, out.sqlstate)
            else:
                error = None
                local = self.refund_local(item, now)
                if out.kind != OK and out.kind != BUSY:
                    self.retry_db_at = now + self.backoff_us
                    self.failure_reason = TIMEOUT if out.kind == TIMEOUT else ERROR
                    self.failure = out.detail
                if out.kind != OK:
                    self._warnings_due([item], now, TIMEOUT if out.kind != ERROR else ERROR,
                                       out.detail, warnings)
        if error is not None:
            raise error from out.error
        self._warn(warnings)
        return bool(out.row[0]) if out.kind == OK else local

    # ---- warnings and counters ----

    def _warnings_due(self, items, now, reason, detail, warnings):
        """The warnings a fallback gives now: each limiter once per interval, bounded."""
        why = "timeout" if reason == TIMEOUT else "error"
        for limiter in dict.fromkeys(it.limiter for it in items):
            quiet_until = self.warned.get(limiter)
            if quiet_until is not None and quiet_until > now:
                continue
            if quiet_until is None:
                # in the order of their warnings, so the first one is quiet the shortest
                while self.warned and next(iter(self.warned.values())) <= now:
                    self.warned.popitem(last=False)
                if len(self.warned) >= MAX_WARNED_LIMITERS:
                    if now >= self.summary_due:
                        self.summary_due = now + self.warning_interval_us
                        warnings.append((
                            f"more than {MAX_WARNED_LIMITERS} limiters are decided in memory at the same "
                            f"limit: the database failed ({why}: {detail}); it is tried again at most every "
                            f"{self.backoff_ms} ms; only {MAX_WARNED_LIMITERS} are named, each at most once "
                            f"per {self.warning_interval_ms} ms, and this line comes at most once per "
                            f"{self.warning_interval_ms} ms", {"limiter": None, "reason": why, "detail": detail}))
                    continue
            self.warned[limiter] = now + self.warning_interval_us
            self.warned.move_to_end(limiter)
            warnings.append((f'limiter "{limiter}" is decided in memory at the same limit: the database '
                             f"failed ({why}: {detail}); it is tried again at most every {self.backoff_ms} ms",
                             {"limiter": limiter, "reason": why, "detail": detail}))

    def _warn(self, warnings):
        # extra: limiter (None on the summary line), reason (timeout or error), detail
        for message, extra in warnings:
            self.logger.warning("%s", message, extra=extra)

    def stats(self):
        with self.lock:
            return Stats(evictions=self.table.evictions, keys=len(self.table.entries), **self.counts)
