"""The in-memory GCRA replays test/vectors/gcra.json, generated from include/gcra.h."""
import json
import os

from ratelimit_client import gcra

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "test", "vectors", "gcra.json")
with open(VECTORS) as f:
    DATA = json.load(f)
MAX_TIME = int(DATA["max_time_us"])


def bucket(b):
    if not b["present"]:
        return None
    return (int(b["tat_us"]), int(b["interval_us"]), int(b["lock_until_us"]), int(b["lock_us"]))


def limit_of(r, now):
    """The limit of a step or request: its rate and burst, and its lockout when lockout_us > 0."""
    error, limit = gcra.limit_init(float(r["rate"]), r["burst"], now, MAX_TIME)
    assert error == gcra.OK
    if int(r["lockout_us"]) > 0:
        error = gcra.lockout_init(limit, int(r["lockout_us"]), float(r["lockout_growth"]),
                                  int(r["lockout_max_us"]), now, MAX_TIME)
        assert error == gcra.OK
    assert (str(limit.lockout_us), str(limit.lockout_max_us), limit.lockout_growth) == (
        r["lockout_us"], r["lockout_max_us"], float(r["lockout_growth"]))
    return limit


def check(d, expect):
    got = {k: getattr(d, k) for k in ("allowed", "store", "normalised", "remaining", "retry_known",
                                      "locked", "lock_started")}
    got.update({k: str(getattr(d, k)) for k in ("new_tat_us", "retry_after_us", "reset_after_us",
                                                "new_lock_until_us", "new_lock_us")})
    assert got == {k: expect[k] for k in got}


def test_limits():
    for case in DATA["limits"]:
        error, limit = gcra.limit_init(float(case["rate"]), case["burst"], int(case["now_us"]), MAX_TIME)
        assert error == case["error"], case
        if error == gcra.OK:
            assert (str(limit.interval_us), str(limit.tolerance_us)) == (case["interval_us"], case["tolerance_us"]), case


def test_lockout_limits():
    for case in DATA["lockout_limits"]:
        now = int(case["now_us"])
        error, limit = gcra.limit_init(1.0, 1, now, MAX_TIME)
        assert error == gcra.OK
        error = gcra.lockout_init(limit, int(case["lockout_us"]), float(case["lockout_growth"]),
                                  int(case["lockout_max_us"]), now, MAX_TIME)
        assert error == case["error"], case
        if error == gcra.OK:
            assert (str(limit.lockout_us), str(limit.lockout_max_us)) == (case["lockout_us"], case["resolved_max_us"]), case
        else:
            assert (limit.lockout_us, limit.lockout_max_us, limit.lockout_growth) == (0, 0, 1.0), case


def test_sequences():
    steps = 0
    for seq in DATA["sequences"]:
        stored = None
        for step in seq["steps"]:
            now = int(step["now_us"])
            limit = limit_of(step, now)
            # the bucket before each step is what the previous ones stored
            assert stored == bucket(step["bucket"]), (seq["name"], steps)
            d = gcra.decide(limit, stored, now, step["cost"])
            check(d, step["expect"])
            if d.store:
                stored = (d.new_tat_us, limit.interval_us, d.new_lock_until_us, d.new_lock_us)
            steps += 1
    assert steps == sum(len(s["steps"]) for s in DATA["sequences"]) > 0


def test_take_all():
    for case in DATA["take_all"]:
        now = int(case["now_us"])
        requests = []
        for r in case["requests"]:
            requests.append(gcra.Request(limit_of(r, now), bucket(r["bucket"]), r["cost"], r["shadow"]))
        combined, decisions = gcra.decide_all(requests, now)
        for d, r in zip(decisions, case["requests"]):
            check(d, r["expect"])
        e = case["expect"]
        assert (combined.allowed, combined.remaining, combined.retry_known, str(combined.retry_after_us),
                str(combined.reset_after_us), combined.binding) == (
            e["allowed"], e["remaining"], e["retry_known"], e["retry_after_us"], e["reset_after_us"], e["binding"]), case["name"]


def test_bucket_forgotten():
    # not in the vectors: test/unit/gcra_test.c's cases
    now, T, sec = int(DATA["sequences"][0]["steps"][0]["now_us"]), 1000000, 1000000
    assert gcra.bucket_forgotten((now, T, now - 900 * sec, 900 * sec), now)
    assert not gcra.bucket_forgotten((now, T, now - 899 * sec, 900 * sec), now)
    assert not gcra.bucket_forgotten((now + 1, T, now - 900 * sec, 900 * sec), now)
    assert gcra.bucket_forgotten(None, now)
