/*
 * gcra_test.c
 *		Unit tests of include/gcra.h, printing TAP.  Expected values are
 *		worked out by hand from the contract's formula.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gcra.h"

static int	tests_run = 0;
static int	tests_failed = 0;

#define SEC 1000000LL
#define NO_MAX INT64_MAX

static void
check(int ok, const char *name, long long got, long long want)
{
	tests_run++;
	if (!ok)
		tests_failed++;
	printf("%sok %d - %s", ok ? "" : "not ", tests_run, name);
	if (!ok)
		printf(" (got %lld, want %lld)", got, want);
	printf("\n");
}

#define EQ(name, got, want) \
	check((long long) (got) == (long long) (want), name, (long long) (got), (long long) (want))

static GcraLimit
limit_of(double rate, int32_t burst)
{
	GcraLimit	limit;

	if (gcra_limit_init(&limit, rate, burst, 0, NO_MAX) != GCRA_OK)
	{
		printf("Bail out! limit %g/%d refused\n", rate, burst);
		exit(1);
	}
	return limit;
}

static GcraBucket
bucket_of(int64_t tat, int64_t interval)
{
	GcraBucket	b = {true, tat, interval, 0, 0};

	return b;
}

static void
test_limits(void)
{
	GcraLimit	l;

	l = limit_of(1.0, 3);
	EQ("1/s is one second per request", l.interval_us, SEC);
	EQ("tolerance is interval times burst", l.tolerance_us, 3 * SEC);
	EQ("600000/s rounds to 2 us (500000/s)", limit_of(600000.0, 1).interval_us, 2);
	EQ("400000/s is 2.5 us, rounded away from zero to 3", limit_of(400000.0, 1).interval_us, 3);
	EQ("1000000/s is 1 us", limit_of(1000000.0, 1).interval_us, 1);
	EQ("10/900 s is 90 s", limit_of(10.0 / 900, 1).interval_us, 90 * SEC);

	EQ("rate 0 refused", gcra_limit_init(&l, 0.0, 1, 0, NO_MAX), GCRA_BAD_RATE);
	EQ("negative rate refused", gcra_limit_init(&l, -1.0, 1, 0, NO_MAX), GCRA_BAD_RATE);
	EQ("NaN rate refused", gcra_limit_init(&l, NAN, 1, 0, NO_MAX), GCRA_BAD_RATE);
	EQ("infinite rate refused", gcra_limit_init(&l, INFINITY, 1, 0, NO_MAX), GCRA_BAD_RATE);
	EQ("rate above 1000000/s refused", gcra_limit_init(&l, 1000000.5, 1, 0, NO_MAX), GCRA_BAD_RATE);
	EQ("burst 0 refused", gcra_limit_init(&l, 1.0, 0, 0, NO_MAX), GCRA_BAD_BURST);
	EQ("tolerance inside the range accepted",
	   gcra_limit_init(&l, 1.0, 10, 0, 20 * SEC), GCRA_OK);
	EQ("now + 2 tau past the range refused",
	   gcra_limit_init(&l, 1.0, 10, 1, 20 * SEC), GCRA_TOLERANCE_TOO_LARGE);
	EQ("interval of 2^62 us refused before overflow",
	   gcra_limit_init(&l, 1e6 / 4611686018427387904.0, 1, 0, NO_MAX),
	   GCRA_TOLERANCE_TOO_LARGE);
	EQ("tau overflowing int64 refused",
	   gcra_limit_init(&l, 1e-6, 2147483647, 0, NO_MAX), GCRA_TOLERANCE_TOO_LARGE);
}

static void
test_decisions(void)
{
	GcraLimit	l = limit_of(1.0, 3);
	GcraBucket	absent = {0};
	GcraBucket	b;
	GcraDecision d;
	const int64_t now = 1000;

	d = gcra_decide(&l, &absent, now, 1);
	EQ("absent key: allowed", d.allowed, 1);
	EQ("absent key: stored", d.store, 1);
	EQ("absent key: new tat is now + T", d.new_tat_us, now + SEC);
	EQ("absent key: remaining burst - 1", d.remaining, 2);
	EQ("absent key: retry_after 0", d.retry_after_us, 0);
	EQ("absent key: reset_after T", d.reset_after_us, SEC);

	b = bucket_of(now + 3 * SEC, SEC);
	d = gcra_decide(&l, &b, now, 1);
	EQ("full debt: denied", d.allowed, 0);
	EQ("full debt: nothing stored", d.store, 0);
	EQ("full debt: retry after one interval", d.retry_after_us, SEC);
	EQ("full debt: remaining 0", d.remaining, 0);
	EQ("full debt: reset after tau", d.reset_after_us, 3 * SEC);

	b = bucket_of(now + SEC + 1, SEC);
	d = gcra_decide(&l, &b, now, 2);
	EQ("cost 2 with 1 cell and 1 us used: denied", d.allowed, 0);
	EQ("cost 2: retry after 1 us", d.retry_after_us, 1);
	EQ("denial reports remaining from the tat it used", d.remaining, 1);
	d = gcra_decide(&l, &b, now + 1, 2);
	EQ("cost 2 one microsecond later: allowed", d.allowed, 1);
	EQ("cost 2: tat moves two intervals", d.new_tat_us, now + 3 * SEC + 1);
	EQ("cost 2: remaining 0", d.remaining, 0);

	d = gcra_decide(&l, &absent, now, 4);
	EQ("cost above burst: denied", d.allowed, 0);
	EQ("cost above burst: retry_after unknown", d.retry_known, 0);
	EQ("cost above burst on absent key: nothing stored", d.store, 0);
	EQ("cost above burst: remaining is the full burst", d.remaining, 3);

	b = bucket_of(now + 2 * SEC, SEC);
	d = gcra_decide(&l, &b, now, 0);
	EQ("peek: allowed", d.allowed, 1);
	EQ("peek: never stored", d.store, 0);
	EQ("peek: remaining", d.remaining, 1);
	EQ("peek: reset_after", d.reset_after_us, 2 * SEC);

	b = bucket_of(now - 1, 7 * SEC);
	d = gcra_decide(&l, &b, now, 4);
	EQ("passed bucket under another T: nothing to normalise", d.store, 0);
	EQ("passed bucket: reset_after 0", d.reset_after_us, 0);
}

static void
test_limit_changes(void)
{
	const int64_t now = 5000;
	GcraLimit	raised = limit_of(10.0, 20);
	GcraLimit	lowered = limit_of(1.0, 3);
	GcraLimit	thirds;
	GcraBucket	b;
	GcraDecision d;

	b = bucket_of(now + 2 * SEC, SEC);	/* two cells used at 1/s */
	d = gcra_decide(&raised, &b, now, 1);
	EQ("raised limit: two cells carry over, request allowed", d.allowed, 1);
	EQ("raised limit: tat is now + 3 new intervals", d.new_tat_us, now + 300000);
	EQ("raised limit: remaining 17", d.remaining, 17);

	b = bucket_of(now + 10 * SEC, SEC);	/* ten cells used at 1/s */
	d = gcra_decide(&lowered, &b, now, 1);
	EQ("lowered limit: debt capped at tau, denied", d.allowed, 0);
	EQ("lowered limit: the denial stores the capped bucket", d.store, 1);
	EQ("lowered limit: stored tat is now + tau", d.new_tat_us, now + 3 * SEC);
	EQ("lowered limit: retry after one interval", d.retry_after_us, SEC);

	b = bucket_of(now + 3 * SEC, SEC);
	d = gcra_decide(&lowered, &b, now, 1);
	EQ("same limit, debt at tau: denial stores nothing", d.store, 0);

	b = bucket_of(now + 3 * SEC + 1, SEC);
	d = gcra_decide(&lowered, &b, now, 1);
	EQ("same T, debt 1 us over tau: capped and stored", d.store, 1);
	EQ("same T, debt 1 us over tau: stored tat is now + tau", d.new_tat_us, now + 3 * SEC);

	b = bucket_of(now + 10 * SEC, SEC);
	d = gcra_decide(&lowered, &b, now, 0);
	EQ("peek never stores, not even a normalisation", d.store, 0);
	EQ("peek reports the normalised bucket", d.reset_after_us, 3 * SEC);

	/* T from 3 us to 2 us: a debt of 5 us is 5 * 2 / 3 = 3.33, floored to 3 */
	EQ("a limit of 2 us per request", gcra_limit_init(&thirds, 500000.0, 100, 0, NO_MAX), GCRA_OK);
	b = bucket_of(now + 5, 3);
	d = gcra_decide(&thirds, &b, now, 1);
	EQ("cells carry over with the floor of debt * T_new / T_old", d.new_tat_us, now + 3 + 2);

	/* 128-bit intermediate: debt * T_new = 8e30 does not fit in 64 bits */
	{
		GcraLimit	slow;

		EQ("a limit of 4e12 us per request",
		   gcra_limit_init(&slow, 1e6 / 4e12, 1000000, 0, NO_MAX), GCRA_OK);
		b = bucket_of(now + 2000000000000000000LL, 2000000000000LL);
		d = gcra_decide(&slow, &b, now, 0);
		EQ("a huge debt rescales exactly", d.reset_after_us, 4000000000000000000LL);
	}

	/* a rescaled debt beyond 2^63 is capped at tau, not wrapped */
	{
		GcraLimit	huge_interval;

		EQ("a limit of 2^33 us per request, burst 1",
		   gcra_limit_init(&huge_interval, 1e6 / 8589934592.0, 1, 0, NO_MAX), GCRA_OK);
		b = bucket_of(now + 2147483647LL, 1);
		d = gcra_decide(&huge_interval, &b, now, 1);
		EQ("a debt rescaled past 64 bits is capped: denied", d.allowed, 0);
		EQ("a debt rescaled past 64 bits: stored tat is now + tau",
		   d.new_tat_us, now + 8589934592LL);
		EQ("a debt rescaled past 64 bits: retry after one interval",
		   d.retry_after_us, 8589934592LL);
	}

	b = bucket_of(now, 2 * SEC);	/* tat == now: not passed yet */
	d = gcra_decide(&lowered, &b, now, 4);
	EQ("tat equal to now under a new T: the denial stores the new T", d.store, 1);
	EQ("tat equal to now: stored tat is now", d.new_tat_us, now);
}

static GcraRequest
request_of(GcraLimit limit, GcraBucket bucket, int32_t cost, bool shadow)
{
	GcraRequest r = {limit, bucket, cost, shadow};

	return r;
}

static void
test_decide_all(void)
{
	const int64_t now = 7000;
	GcraLimit	l3 = limit_of(1.0, 3);
	GcraLimit	l10 = limit_of(10.0, 10);
	GcraBucket	absent = {0};
	GcraRequest r[4];
	GcraDecision d[4];
	GcraCombined c;

	/* both allowed: everything spent, remaining the least */
	r[0] = request_of(l10, absent, 1, false);
	r[1] = request_of(l3, bucket_of(now + SEC, SEC), 1, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("all allowed: allowed", c.allowed, 1);
	EQ("all allowed: the first spends", d[0].store && d[0].new_tat_us == now + SEC / 10, 1);
	EQ("all allowed: the second spends", d[1].store && d[1].new_tat_us == now + 2 * SEC, 1);
	EQ("all allowed: remaining the least", c.remaining, 1);
	EQ("all allowed: retry_after 0", c.retry_after_us, 0);
	EQ("all allowed: reset_after the largest", c.reset_after_us, 2 * SEC);
	EQ("all allowed: binding is the least remaining", c.binding, 1);

	/* one denied: nothing spent, the allowed one reported unspent */
	r[1] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 1, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("one denied: denied", c.allowed, 0);
	EQ("one denied: the other spends nothing", d[0].store, 0);
	EQ("one denied: the other reports its bucket unspent", d[0].remaining, 10);
	EQ("one denied: and reset_after 0", d[0].reset_after_us, 0);
	EQ("one denied: retry_after of the denied", c.retry_after_us, SEC);
	EQ("one denied: binding is the denied", c.binding, 1);
	EQ("one denied: remaining the least", c.remaining, 0);
	EQ("one denied: reset_after the largest", c.reset_after_us, 3 * SEC);

	/* a denial still stores a normalisation of another live bucket */
	r[0] = request_of(l3, bucket_of(now + SEC, 2 * SEC), 1, false);
	r[1] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 1, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("normalised and denied elsewhere: denied", c.allowed, 0);
	EQ("normalised and denied elsewhere: the normalisation is stored", d[0].store, 1);
	EQ("normalised and denied elsewhere: at the normalised tat, not spent",
	   d[0].new_tat_us, now + SEC / 2);
	EQ("normalised and denied elsewhere: remaining from it", d[0].remaining, 2);

	/* retry_after the largest among the denied, NULL first, ties the first */
	r[0] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 1, false);
	r[1] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 2, false);
	r[2] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 2, false);
	c = gcra_decide_all(r, 3, now, d);
	EQ("largest retry_after among the denied", c.retry_after_us, 2 * SEC);
	EQ("tie: the first of the largest binds", c.binding, 1);
	r[3] = request_of(l3, absent, 4, false);
	c = gcra_decide_all(r, 4, now, d);
	EQ("a denied cost above burst: retry_after unknown", c.retry_known, 0);
	EQ("and it binds", c.binding, 3);
	r[0] = request_of(l3, absent, 5, false);
	c = gcra_decide_all(r, 4, now, d);
	EQ("two above burst: the first binds", c.binding, 0);

	/* allowed ties: the first with the least remaining */
	r[0] = request_of(l3, bucket_of(now + SEC, SEC), 1, false);
	r[1] = request_of(l3, bucket_of(now + SEC, SEC), 1, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("allowed tie: the first binds", c.binding, 0);

	/* shadow: decided and stored as enforced, never denies */
	r[0] = request_of(l10, absent, 1, false);
	r[1] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 1, true);
	c = gcra_decide_all(r, 2, now, d);
	EQ("shadow denial: allowed", c.allowed, 1);
	EQ("shadow denial: the enforced request spends", d[0].store, 1);
	EQ("shadow denial: is a would-be denial", d[1].allowed, 0);
	EQ("shadow denial: stores nothing, as enforced", d[1].store, 0);
	EQ("shadow denial: retry_after 0", c.retry_after_us, 0);
	EQ("shadow denial: its remaining counts", c.remaining, 0);
	EQ("shadow denial: binding the least remaining", c.binding, 1);
	r[0] = request_of(l3, bucket_of(now + 3 * SEC, SEC), 1, false);
	r[1] = request_of(l10, absent, 1, true);
	c = gcra_decide_all(r, 2, now, d);
	EQ("enforced denial: denied", c.allowed, 0);
	EQ("enforced denial: an allowed shadow spends nothing", d[1].store, 0);
	EQ("enforced denial: binding the enforced", c.binding, 0);

	/* peeks never store and never deny */
	r[0] = request_of(l3, bucket_of(now + 2 * SEC, 2 * SEC), 0, false);
	r[1] = request_of(l10, absent, 1, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("peek in a call: allowed", c.allowed, 1);
	EQ("peek in a call: not stored, even normalised", d[0].store, 0);
	EQ("peek in a call: reports the normalised bucket", d[0].remaining, 2);
}

static GcraBucket
locked_bucket(int64_t tat, int64_t interval, int64_t lock_until, int64_t lock_us)
{
	GcraBucket	b = {true, tat, interval, lock_until, lock_us};

	return b;
}

/* 1 per minute, burst 3; locked 15 minutes, doubling to at most an hour */
static GcraLimit
sign_in_limit(void)
{
	GcraLimit	l = limit_of(1.0 / 60, 3);

	if (gcra_lockout_init(&l, 900 * SEC, 2.0, 3600 * SEC, 0, NO_MAX) != GCRA_OK)
	{
		printf("Bail out! lockout refused\n");
		exit(1);
	}
	return l;
}

static void
test_lockout_limits(void)
{
	GcraLimit	l = limit_of(1.0, 1);

	EQ("no lockout by default", l.lockout_us, 0);
	EQ("lockout of 1 s accepted", gcra_lockout_init(&l, SEC, 1.0, 0, 0, NO_MAX), GCRA_OK);
	EQ("lockout_max 0 means the lockout", l.lockout_max_us, SEC);
	EQ("lockout under 1 s refused", gcra_lockout_init(&l, SEC - 1, 1.0, 0, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("lockout of 366 days accepted",
	   gcra_lockout_init(&l, GCRA_MAX_LOCKOUT_US, 1.0, 0, 0, NO_MAX), GCRA_OK);
	EQ("lockout over 366 days refused",
	   gcra_lockout_init(&l, GCRA_MAX_LOCKOUT_US + 1, 1.0, 0, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("lockout_max below lockout refused",
	   gcra_lockout_init(&l, 2 * SEC, 1.0, SEC, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("lockout_max over 366 days refused",
	   gcra_lockout_init(&l, SEC, 1.0, GCRA_MAX_LOCKOUT_US + 1, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("growth below 1 refused", gcra_lockout_init(&l, SEC, 0.99, 0, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("growth of 100 accepted", gcra_lockout_init(&l, SEC, 100.0, 0, 0, NO_MAX), GCRA_OK);
	EQ("growth above 100 refused", gcra_lockout_init(&l, SEC, 100.5, 0, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("growth NaN refused", gcra_lockout_init(&l, SEC, NAN, 0, 0, NO_MAX), GCRA_BAD_LOCKOUT);
	EQ("now + 2 lockout_max inside the range accepted",
	   gcra_lockout_init(&l, SEC, 1.0, 10 * SEC, 0, 20 * SEC), GCRA_OK);
	EQ("now + 2 lockout_max past the range refused",
	   gcra_lockout_init(&l, SEC, 1.0, 10 * SEC, 1, 20 * SEC), GCRA_TOLERANCE_TOO_LARGE);
}

static void
test_lockout(void)
{
	const int64_t now = 10 * SEC;
	const int64_t T = 60 * SEC;
	GcraLimit	l = sign_in_limit();
	GcraLimit	plain = limit_of(1.0 / 60, 3);
	GcraBucket	absent = {0};
	GcraBucket	b;
	GcraDecision d;

	d = gcra_decide(&l, &absent, now, 1);
	EQ("lockout: an allowed request is as without one", d.allowed && !d.locked, 1);
	EQ("lockout: an allowed request keeps no lock", d.new_lock_until_us + d.new_lock_us, 0);

	b = bucket_of(now + 3 * T, T);
	d = gcra_decide(&l, &b, now, 1);
	EQ("starting: denied", d.allowed, 0);
	EQ("starting: a lockout starts", d.lock_started && d.locked, 1);
	EQ("starting: written once", d.store, 1);
	EQ("starting: of the first length", d.new_lock_us, 900 * SEC);
	EQ("starting: until now + L", d.new_lock_until_us, now + 900 * SEC);
	EQ("starting: retry_after L", d.retry_after_us, 900 * SEC);
	EQ("starting: retry_after known", d.retry_known, 1);
	EQ("starting: remaining 0", d.remaining, 0);
	EQ("starting: reset_after the lock's end", d.reset_after_us, 900 * SEC);
	EQ("starting: tat unchanged", d.new_tat_us, now + 3 * T);

	b = locked_bucket(now + 3 * T, T, now + 900 * SEC, 900 * SEC);
	d = gcra_decide(&l, &b, now + 100 * SEC, 1);
	EQ("locked: denied", d.allowed, 0);
	EQ("locked: nothing written", d.store, 0);
	EQ("locked: no new lockout", d.lock_started, 0);
	EQ("locked: retry_after the lock's remainder", d.retry_after_us, 800 * SEC);
	EQ("locked: remaining 0", d.remaining, 0);
	EQ("locked: reset_after the lock's remainder", d.reset_after_us, 800 * SEC);
	d = gcra_decide(&l, &b, now + 100 * SEC, 0);
	EQ("peek while locked: allowed", d.allowed, 1);
	EQ("peek while locked: remaining 0", d.remaining, 0);
	EQ("peek while locked: retry_after 0", d.retry_after_us, 0);
	EQ("peek while locked: reset_after the lock's remainder", d.reset_after_us, 800 * SEC);
	EQ("peek while locked: not written", d.store, 0);
	d = gcra_decide(&l, &b, now + 100 * SEC, 4);
	EQ("cost above burst while locked: denied", d.allowed, 0);
	EQ("cost above burst while locked: retry_after known", d.retry_known, 1);
	EQ("cost above burst while locked: the lock's remainder", d.retry_after_us, 800 * SEC);
	d = gcra_decide(&l, &b, now + 900 * SEC - 1, 1);
	EQ("locked until the microsecond before lock_until", d.retry_after_us, 1);

	/* a lowered limit's pending normalisation waits for the next unlocked call */
	b = locked_bucket(now + 10 * T, 2 * T, now + 100 * SEC, 900 * SEC);
	d = gcra_decide(&l, &b, now, 1);
	EQ("locked, normalisation pending: not written", d.store, 0);
	EQ("locked: reset_after from the normalised tat", d.reset_after_us, 3 * T);
	EQ("locked: the normalised tat", d.new_tat_us, now + 3 * T);

	b = locked_bucket(now + 3 * T, T, now + 900 * SEC, 900 * SEC);
	d = gcra_decide(&l, &b, now + 900 * SEC, 1);
	EQ("at lock_until: no longer locked", d.allowed && !d.locked, 1);
	EQ("at lock_until: the allowed request keeps the lock state",
	   d.new_lock_until_us == now + 900 * SEC && d.new_lock_us == 900 * SEC, 1);

	b = locked_bucket(now + 3 * T, T, now - 899 * SEC, 900 * SEC);
	d = gcra_decide(&l, &b, now, 1);
	EQ("growing: offending within the last lockout's length", d.lock_started, 1);
	EQ("growing: L doubled", d.new_lock_us, 1800 * SEC);
	EQ("growing: retry_after L", d.retry_after_us, 1800 * SEC);
	b = locked_bucket(now + 3 * T, T, now - 900 * SEC, 900 * SEC);
	d = gcra_decide(&l, &b, now, 1);
	EQ("forgiven: after as long as it lasted, the first length", d.new_lock_us, 900 * SEC);
	b = locked_bucket(now + 3 * T, T, now - SEC, 3000 * SEC);
	d = gcra_decide(&l, &b, now, 1);
	EQ("capped at lockout_max", d.new_lock_us, 3600 * SEC);
	b = locked_bucket(now + 3 * T, T, now - SEC, 300 * SEC);
	d = gcra_decide(&l, &b, now, 1);
	EQ("a grown length below lockout is lockout", d.new_lock_us, 900 * SEC);
	{
		GcraLimit	tenth = limit_of(1.0, 1);

		gcra_lockout_init(&tenth, SEC, 1.1, 10 * SEC, 0, NO_MAX);
		b = locked_bucket(now + SEC, SEC, now - 1, 3 * SEC);
		d = gcra_decide(&tenth, &b, now, 1);
		EQ("growth as one double product, floored", d.new_lock_us,
		   (int64_t) floor(3000000.0 * 1.1));
	}

	b = bucket_of(now + 3 * T, T);
	d = gcra_decide(&l, &b, now, 4);
	EQ("cost above burst starts no lockout", d.lock_started || d.locked, 0);
	EQ("cost above burst: retry_after unknown", d.retry_known, 0);
	EQ("cost above burst: nothing written", d.store, 0);

	b = locked_bucket(now + 3 * T, T, now + 900 * SEC, 900 * SEC);
	d = gcra_decide(&plain, &b, now, 1);
	EQ("lockout removed from the policy: a stored lock is ignored", d.locked, 0);
	EQ("lockout removed: GCRA decides", d.retry_after_us, T);
	b = locked_bucket(now + T, T, now + 900 * SEC, 900 * SEC);
	d = gcra_decide(&plain, &b, now, 1);
	EQ("lockout removed: an allowed request keeps the stored lock",
	   d.allowed && d.new_lock_until_us == now + 900 * SEC && d.new_lock_us == 900 * SEC, 1);

	b = locked_bucket(now, T, now - 900 * SEC, 900 * SEC);
	EQ("forgotten once tat and lock_until + lock_us have passed",
	   gcra_bucket_forgotten(&b, now), 1);
	b = locked_bucket(now, T, now - 899 * SEC, 900 * SEC);
	EQ("not forgotten while a new offence would grow the lockout",
	   gcra_bucket_forgotten(&b, now), 0);
	b = locked_bucket(now + 1, T, now - 900 * SEC, 900 * SEC);
	EQ("not forgotten while tat is ahead", gcra_bucket_forgotten(&b, now), 0);
	EQ("an absent bucket is forgotten", gcra_bucket_forgotten(&absent, now), 1);
}

static void
test_lockout_decide_all(void)
{
	const int64_t now = 20 * SEC;
	const int64_t T = 60 * SEC;
	GcraLimit	l = sign_in_limit();
	GcraLimit	l10 = limit_of(10.0, 10);
	GcraBucket	absent = {0};
	GcraRequest r[3];
	GcraDecision d[3];
	GcraCombined c;

	r[0] = request_of(l10, absent, 1, false);
	r[1] = request_of(l, bucket_of(now + 3 * T, T), 1, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("a lockout starting in a call denies it", c.allowed, 0);
	EQ("its retry_after is known", c.retry_known, 1);
	EQ("its retry_after is L", c.retry_after_us, 900 * SEC);
	EQ("it binds", c.binding, 1);
	EQ("the lockout is written though the call is denied", d[1].store && d[1].lock_started, 1);
	EQ("nothing else is spent", d[0].store, 0);

	r[1] = request_of(l, locked_bucket(now + 3 * T, T, now + 100 * SEC, 900 * SEC), 5, false);
	r[2] = request_of(l10, bucket_of(now + SEC, SEC / 10), 1, false);
	c = gcra_decide_all(r, 3, now, d);
	EQ("a locked request above burst denies with a known retry_after", c.retry_known, 1);
	EQ("the lock's remainder binds", c.retry_after_us, 100 * SEC);
	EQ("a locked request writes nothing", d[1].store, 0);

	r[1] = request_of(l, locked_bucket(now + 3 * T, T, now + 100 * SEC, 900 * SEC), 0, false);
	c = gcra_decide_all(r, 2, now, d);
	EQ("a peek at a locked key does not deny the call", c.allowed, 1);
	EQ("and its remaining 0 is the least", c.remaining, 0);

	r[1] = request_of(l, bucket_of(now + 3 * T, T), 1, true);
	c = gcra_decide_all(r, 2, now, d);
	EQ("shadow: a would-be lockout does not deny", c.allowed, 1);
	EQ("shadow: the lockout is started and written", d[1].lock_started && d[1].store, 1);
	EQ("shadow: the enforced request spends", d[0].store, 1);
}

int
main(void)
{
	test_limits();
	test_decisions();
	test_limit_changes();
	test_decide_all();
	test_lockout_limits();
	test_lockout();
	test_lockout_decide_all();
	printf("1..%d\n", tests_run);
	return tests_failed != 0;
}
