"""The in-memory GCRA replays test/vectors/gcra.json, generated from include/gcra.h."""
import json
import os

import pytest

from ratelimit_client import gcra

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "test", "vectors", "gcra.json")
with open(VECTORS) as f:
    DATA = json.load(f)
MAX_TIME = int(DATA["max_time_us"])


def bucket(b):
    return (int(b["tat_us"]), int(b["interval_us"])) if b["present"] else None


def check(d, expect):
    got = {k: getattr(d, k) for k in ("allowed", "store", "normalised", "remaining", "retry_known")}
    got.update({k: str(getattr(d, k)) for k in ("new_tat_us", "retry_after_us", "reset_after_us")})
    assert got == {k: expect[k] for k in got}


def test_limits():
    for case in DATA["limits"]:
        error, limit = gcra.limit_init(float(case["rate"]), case["burst"], int(case["now_us"]), MAX_TIME)
        assert error == case["error"], case
        if error == gcra.OK:
            assert (str(limit.interval_us), str(limit.tolerance_us)) == (case["interval_us"], case["tolerance_us"]), case


def test_sequences():
    steps = 0
    for seq in DATA["sequences"]:
        for step in seq["steps"]:
            error, limit = gcra.limit_init(float(step["rate"]), step["burst"], int(step["now_us"]), MAX_TIME)
            assert error == gcra.OK
            check(gcra.decide(limit, bucket(step["bucket"]), int(step["now_us"]), step["cost"]), step["expect"])
            steps += 1
    assert steps == sum(len(s["steps"]) for s in DATA["sequences"]) > 0


def test_take_all():
    for case in DATA["take_all"]:
        now = int(case["now_us"])
        requests = []
        for r in case["requests"]:
            error, limit = gcra.limit_init(float(r["rate"]), r["burst"], now, MAX_TIME)
            assert error == gcra.OK
            requests.append(gcra.Request(limit, bucket(r["bucket"]), r["cost"], r["shadow"]))
        combined, decisions = gcra.decide_all(requests, now)
        for d, r in zip(decisions, case["requests"]):
            check(d, r["expect"])
        e = case["expect"]
        assert (combined.allowed, combined.remaining, combined.retry_known, str(combined.retry_after_us),
                str(combined.reset_after_us), combined.binding) == (
            e["allowed"], e["remaining"], e["retry_known"], e["retry_after_us"], e["reset_after_us"], e["binding"]), case["name"]
