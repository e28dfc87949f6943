"""Limits as Python users write them, the 1.x positional forms, and the types."""
import importlib
import inspect
import uuid
from datetime import timedelta
from importlib import resources

import pytest

from ratelimit_client import Rate, RateLimitError, Request, Source


@pytest.mark.parametrize("text, limit, seconds", [
    ("5/minute", 5, 60), ("100/hour", 100, 3600), ("10 per 15 minutes", 10, 900),
    ("10/15 minutes", 10, 900), ("5/m", 5, 60), ("3/s", 3, 1), ("2 per day", 2, 86400), ("7/2 hrs", 7, 7200),
    (" 1 / Second ", 1, 1)])
def test_notation(text, limit, seconds):
    r = Rate.parse(text)
    assert r == Rate(limit, per=timedelta(seconds=seconds))
    assert r.rate == limit / seconds
    assert Request("l", "k", text) == Request("l", "k", limit / seconds, limit)


@pytest.mark.parametrize("text", ["5/ms", "0/minute", "5/0 minutes", "5", "minute", "5/fortnight", "-1/s", "5//m"])
def test_bad_notation(text):
    with pytest.raises(RateLimitError) as e:
        Request("l", "k", text)
    assert e.value.sqlstate == "22023" and "rate" in str(e.value)


def test_constructors():
    assert Rate.per_second(4) == Rate(4)
    assert Rate.per_minute(5) == Rate(5, per=timedelta(minutes=1))
    assert Rate.per_hour(100).rate == 100 / 3600
    assert Rate.per_day(2) == Rate.parse("2/day")
    # a Rate's burst is its limit, unless burst is given
    assert Request("l", "k", Rate.per_minute(5), 10) == Request("l", "k", 5 / 60, 10)
    for bad in (lambda: Rate(0), lambda: Rate(1.5), lambda: Rate(1, per=timedelta(0)), lambda: Rate(1, per=60)):
        with pytest.raises(RateLimitError):
            bad()
    with pytest.raises(AttributeError):
        Rate(1).limit = 2


def test_native_and_positional_forms_decide_alike(make_limiter):
    """rate= as notation, as a Rate, and the 1.x positional form are one bucket."""
    lim = make_limiter("table", deadline=5.0)
    key = uuid.uuid4().hex
    ds = [lim.take("native", key, rate="3/hour"), lim.take("native", key, rate=Rate.per_hour(3)),
          lim.take("native", key, 3 / 3600, 3), lim.take("native", key, 3 / 3600, 3, 1)]
    assert [d.allowed for d in ds] == [True, True, True, False]
    assert all(d.source in (Source.DATABASE, Source.LOCAL) for d in ds)
    assert 1199 < ds[3].retry_after <= 1200
    assert lim.take("native", key, rate="3/hour", cost=0).remaining == 0
    d = lim.take_all([Request("native", key, "3/hour", cost=0), ("native2", key, Rate.per_minute(1))])
    assert d.allowed
    with pytest.raises(TypeError):
        lim.take("native", key, 1.0, rate=1.0)
    with pytest.raises(TypeError):
        lim.take("native", key, 1.0, 1, 1, 1)


PUBLIC = ["ratelimit_client", "ratelimit_client.client", "ratelimit_client.aio", "ratelimit_client.http",
          "ratelimit_client.flask", "ratelimit_client.asgi", "ratelimit_client.fastapi",
          "ratelimit_client.django"]


def test_typed():
    """py.typed ships, and every public function and method is annotated."""
    assert resources.files("ratelimit_client").joinpath("py.typed").is_file()
    missing = []
    for name in PUBLIC:
        module = importlib.import_module(name)
        names = getattr(module, "__all__", None) or [a for a, o in vars(module).items()
                                                     if getattr(o, "__module__", None) == name]
        for attr in names:
            obj = getattr(module, attr)
            if attr.startswith("_"):
                continue
            functions = [(attr, obj)] if inspect.isfunction(obj) else []
            if inspect.isclass(obj):
                functions = [(f"{attr}.{m}", f) for m, f in vars(obj).items()
                             if inspect.isfunction(f) and (not m.startswith("_") or m in ("__init__", "__call__"))]
                functions += [(f"{attr}.{m}", f.__func__) for m, f in vars(obj).items()
                              if isinstance(f, classmethod) and not m.startswith("_")]
            for qual, f in functions:
                sig = inspect.signature(f)
                for p in list(sig.parameters.values())[1 if "." in qual else 0:]:
                    if p.annotation is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                        missing.append(f"{name}.{qual}({p.name})")
                if sig.return_annotation is inspect.Signature.empty:
                    missing.append(f"{name}.{qual} -> ?")
    assert missing == []
