"""Limits as Python users write them: "5/minute", "10 per 15 minutes", Rate.per_minute(5).

A Rate of n per period is rl_take's rate n / period (per second) and burst n:
n requests at once, then one every period / n.
"""

import re
from datetime import timedelta
from typing import Any, Dict, Optional, Tuple, Union

from . import _core

_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
          "h": 3600, "hr": 3600, "hour": 3600, "d": 86400, "day": 86400}
_NOTATION = re.compile(r"\s*([0-9]+)\s*(?:/|per)\s*(?:([0-9]+)\s*)?([a-z]+)\s*\Z", re.IGNORECASE)


class Rate:
    """limit requests per period (a timedelta): the burst is limit, the rate limit / period."""

    __slots__ = ("limit", "per")
    limit: int
    per: timedelta

    def __init__(self, limit: int, per: timedelta = timedelta(seconds=1)) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _core.RateLimitError(f"rate's limit must be an int of at least 1, not {limit!r}", None, "22023")
        if not isinstance(per, timedelta) or per <= timedelta(0):
            raise _core.RateLimitError(f"rate's period must be a timedelta above 0, not {per!r}", None, "22023")
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "per", per)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Rate is immutable")

    @classmethod
    def per_second(cls, limit: int) -> "Rate":
        return cls(limit, timedelta(seconds=1))

    @classmethod
    def per_minute(cls, limit: int) -> "Rate":
        return cls(limit, timedelta(minutes=1))

    @classmethod
    def per_hour(cls, limit: int) -> "Rate":
        return cls(limit, timedelta(hours=1))

    @classmethod
    def per_day(cls, limit: int) -> "Rate":
        return cls(limit, timedelta(days=1))

    @classmethod
    def parse(cls, text: str) -> "Rate":
        """"5/minute", "100/hour", "10/15 minutes", "10 per 15 minutes", "5/m" (s, m, h, d)."""
        m = _NOTATION.match(text) if isinstance(text, str) else None
        word = m.group(3).lower() if m else ""
        # plurals of the words ("minutes", "hrs"), not of the letters ("ms")
        unit = _UNITS.get(word[:-1] if len(word) > 2 and word.endswith("s") else word)
        if unit is None or m.group(2) == "0":
            raise _core.RateLimitError(f'rate must read as "5/minute" or "10 per 15 minutes", not {text!r}',
                                       None, "22023")
        return cls(int(m.group(1)), timedelta(seconds=unit * int(m.group(2) or 1)))

    @property
    def rate(self) -> float:
        """Per second, as rl_take's rate."""
        return self.limit / self.per.total_seconds()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rate) and (self.limit, self.per) == (other.limit, other.per)

    def __hash__(self) -> int:
        return hash((self.limit, self.per))

    def __repr__(self) -> str:
        return f"Rate({self.limit}, per={self.per!r})"


RateLike = Union[Rate, str, float]


def resolve(rate: Optional[RateLike], burst: Optional[int]) -> Tuple[Optional[float], Optional[int]]:
    """rl_take's (rate, burst) of a rate given as a Rate, its notation or per second;
    a Rate's burst is its limit unless burst is given."""
    if isinstance(rate, str):
        rate = Rate.parse(rate)
    if isinstance(rate, Rate):
        return rate.rate, rate.limit if burst is None else burst
    return rate, burst


def legacy(positional: Tuple[Any, ...], names: Tuple[str, ...], given: Dict[str, Any]) -> Dict[str, Any]:
    """The 1.x positional forms (take(limiter, key, rate, burst, cost)) as keywords."""
    if len(positional) > len(names):
        raise TypeError(f"at most {2 + len(names)} positional arguments")
    for name, value in zip(names, positional):
        if given.get(name) is not None and not (name == "cost" and given[name] == 1):
            raise TypeError(f"{name} given both by position and by keyword")
        given[name] = value
    return given
