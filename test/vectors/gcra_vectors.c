/*
 * gcra_vectors.c
 *		Writes test/vectors/gcra.json: request sequences and the decisions
 *		include/gcra.h makes for them, which every client library's own
 *		in-memory GCRA replays exactly.
 *
 * The decisions come from gcra.h itself, so a client that passes the vectors
 * decides as the server and the C client do.  Every 64-bit integer is written
 * as a decimal string: a JSON number loses digits past 2^53 in JavaScript.
 * Rates are strings too ("NaN" and "Infinity" among them), printed with 17
 * digits so that every language parses back the same double.  test/vectors/
 * check (in test/run's unit suite) regenerates the file and fails when it
 * differs from the committed one; after a change of gcra.h or of this file:
 *
 *	  cc -std=c11 -Iinclude -o /tmp/gcra_vectors test/vectors/gcra_vectors.c -lm
 *	  /tmp/gcra_vectors > test/vectors/gcra.json
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "gcra.h"

/* PostgreSQL's end of the timestamptz range, as the server and C client use */
#define PG_MAX_TIME_US (INT64_C(9223371331200000000) - 1)
#define SEC INT64_C(1000000)
/* 2026-01-01 00:00:00 UTC in microseconds since 2000-01-01, the server's epoch */
#define NOW0 INT64_C(820454400000000)

static const char *
error_name(GcraError error)
{
	switch (error)
	{
		case GCRA_OK:
			return "ok";
		case GCRA_BAD_RATE:
			return "bad_rate";
		case GCRA_BAD_BURST:
			return "bad_burst";
		case GCRA_BAD_COST:
			return "bad_cost";
		case GCRA_TOLERANCE_TOO_LARGE:
			return "tolerance_too_large";
		case GCRA_BAD_LOCKOUT:
			return "bad_lockout";
	}
	return "unknown";
}

static bool first_item;

/* a double as a JSON string that every language parses back exactly */
static const char *
rate_text(double rate)
{
	static char buf[64];

	if (isnan(rate))
		return "\"NaN\"";
	if (isinf(rate))
		return rate > 0 ? "\"Infinity\"" : "\"-Infinity\"";
	snprintf(buf, sizeof(buf), "\"%.17g\"", rate);
	return buf;
}

static void
open_item(void)
{
	printf("%s\n    ", first_item ? "" : ",");
	first_item = false;
}

static void
print_bucket(const GcraBucket *b)
{
	printf("{\"present\": %s, \"tat_us\": \"%" PRId64 "\", \"interval_us\": \"%" PRId64
		   "\", \"lock_until_us\": \"%" PRId64 "\", \"lock_us\": \"%" PRId64 "\"}",
		   b->present ? "true" : "false", b->present ? b->tat_us : 0,
		   b->present ? b->interval_us : 0, b->present ? b->lock_until_us : 0,
		   b->present ? b->lock_us : 0);
}

static void
print_decision(const GcraDecision *d)
{
	printf("{\"allowed\": %s, \"store\": %s, \"normalised\": %s, \"new_tat_us\": \"%" PRId64
		   "\", \"remaining\": %d, \"retry_known\": %s, \"retry_after_us\": \"%" PRId64
		   "\", \"reset_after_us\": \"%" PRId64 "\",\n        \"locked\": %s, \"lock_started\": %s"
		   ", \"new_lock_until_us\": \"%" PRId64 "\", \"new_lock_us\": \"%" PRId64 "\"}",
		   d->allowed ? "true" : "false", d->store ? "true" : "false",
		   d->normalised ? "true" : "false", d->new_tat_us, d->remaining,
		   d->retry_known ? "true" : "false", d->retry_after_us, d->reset_after_us,
		   d->locked ? "true" : "false", d->lock_started ? "true" : "false",
		   d->new_lock_until_us, d->new_lock_us);
}

/* limits: gcra_limit_init's answer for a rate, burst and now */
static void
limit_case(double rate, int32_t burst, int64_t now_us)
{
	GcraLimit	limit = {0};
	GcraError	error = gcra_limit_init(&limit, rate, burst, now_us, PG_MAX_TIME_US);

	open_item();
	printf("{\"rate\": %s, \"burst\": %d, \"now_us\": \"%" PRId64 "\", \"error\": \"%s\"",
		   rate_text(rate), burst, now_us, error_name(error));
	if (error == GCRA_OK)
		printf(", \"interval_us\": \"%" PRId64 "\", \"tolerance_us\": \"%" PRId64 "\"",
			   limit.interval_us, limit.tolerance_us);
	printf("}");
}

/* lockout_limits: gcra_lockout_init's answer for a lockout at now */
static void
lockout_limit_case(int64_t lockout_us, double growth, int64_t max_us, int64_t now_us)
{
	GcraLimit	limit = {0};
	GcraError	error = gcra_limit_init(&limit, 1.0, 1, now_us, PG_MAX_TIME_US);

	if (error == GCRA_OK)
		error = gcra_lockout_init(&limit, lockout_us, growth, max_us, now_us, PG_MAX_TIME_US);
	open_item();
	printf("{\"lockout_us\": \"%" PRId64 "\", \"lockout_growth\": %s, \"lockout_max_us\": \"%" PRId64
		   "\", \"now_us\": \"%" PRId64 "\", \"error\": \"%s\"",
		   lockout_us, rate_text(growth), max_us, now_us, error_name(error));
	if (error == GCRA_OK)
		printf(", \"resolved_max_us\": \"%" PRId64 "\"", limit.lockout_max_us);
	printf("}");
}

/*
 * One request of a sequence: at now + offset, under rate/burst and the
 * lockout given (lockout_us 0: none; lockout_max_us 0: lockout_us), of cost.
 */
typedef struct Step
{
	int64_t		offset_us;
	double		rate;
	int32_t		burst;
	int32_t		cost;
	int64_t		lockout_us;
	double		lockout_growth;
	int64_t		lockout_max_us;
} Step;

/* the lockout fields of a Step or an AllRequest without one */
#define NO_LOCKOUT 0, 1.0, 0

/* A limit of rate, burst and lockout at now, or exit naming what. */
static GcraLimit
limit_of(double rate, int32_t burst, int64_t lockout_us, double growth,
		 int64_t max_us, int64_t now, const char *what)
{
	GcraLimit	limit;

	if (gcra_limit_init(&limit, rate, burst, now, PG_MAX_TIME_US) != GCRA_OK ||
		(lockout_us > 0 &&
		 gcra_lockout_init(&limit, lockout_us, growth, max_us, now, PG_MAX_TIME_US) != GCRA_OK))
	{
		fprintf(stderr, "%s has a bad limit\n", what);
		exit(1);
	}
	return limit;
}

/* the lockout of a limit, as the fields of a JSON object */
static void
print_lockout(const GcraLimit *limit)
{
	printf(", \"lockout_us\": \"%" PRId64 "\", \"lockout_growth\": %s, \"lockout_max_us\": \"%" PRId64 "\"",
		   limit->lockout_us, rate_text(limit->lockout_growth), limit->lockout_max_us);
}

/*
 * sequences: one key's requests in order; each step gives the bucket before
 * it (the previous step's stored state) and the decision.
 */
static void
sequence(const char *name, const Step *steps, int n)
{
	GcraBucket	bucket = {0};
	int			i;

	open_item();
	printf("{\"name\": \"%s\", \"steps\": [", name);
	for (i = 0; i < n; i++)
	{
		int64_t		now = NOW0 + steps[i].offset_us;
		GcraLimit	limit = limit_of(steps[i].rate, steps[i].burst, steps[i].lockout_us,
									 steps[i].lockout_growth, steps[i].lockout_max_us,
									 now, name);
		GcraDecision d = gcra_decide(&limit, &bucket, now, steps[i].cost);

		printf("%s\n      {\"now_us\": \"%" PRId64 "\", \"rate\": %s, \"burst\": %d, \"cost\": %d",
			   i ? "," : "", now, rate_text(steps[i].rate), steps[i].burst, steps[i].cost);
		print_lockout(&limit);
		printf(",\n       \"bucket\": ");
		print_bucket(&bucket);
		printf(",\n       \"expect\": ");
		print_decision(&d);
		printf("}");
		if (d.store)
		{
			bucket.present = true;
			bucket.tat_us = d.new_tat_us;
			bucket.interval_us = limit.interval_us;
			bucket.lock_until_us = d.new_lock_until_us;
			bucket.lock_us = d.new_lock_us;
		}
	}
	printf("\n    ]}");
}

/* One request of a decision over several buckets. */
typedef struct AllRequest
{
	double		rate;
	int32_t		burst;
	int32_t		cost;
	bool		shadow;
	bool		present;
	int64_t		tat_offset_us;	/* the stored tat, relative to now */
	double		stored_rate;	/* the rate the bucket was written with */
	int64_t		lockout_us;		/* 0: none */
	double		lockout_growth;
	int64_t		lockout_max_us;
	int64_t		lock_until_offset_us;	/* the stored lock, relative to now */
	int64_t		lock_us;
} AllRequest;

/* take_all: gcra_decide_all over several buckets at one now */
static void
take_all(const char *name, const AllRequest *reqs, int n)
{
	GcraRequest requests[GCRA_MAX_REQUESTS];
	GcraDecision decisions[GCRA_MAX_REQUESTS];
	GcraCombined c;
	int64_t		now = NOW0;
	int			i;

	for (i = 0; i < n; i++)
	{
		GcraLimit	stored = limit_of(reqs[i].stored_rate, 1, 0, 1.0, 0, now, name);

		requests[i].limit = limit_of(reqs[i].rate, reqs[i].burst, reqs[i].lockout_us,
									 reqs[i].lockout_growth, reqs[i].lockout_max_us,
									 now, name);
		requests[i].bucket.present = reqs[i].present;
		requests[i].bucket.tat_us = now + reqs[i].tat_offset_us;
		requests[i].bucket.interval_us = stored.interval_us;
		requests[i].bucket.lock_until_us = reqs[i].lock_us > 0 ? now + reqs[i].lock_until_offset_us : 0;
		requests[i].bucket.lock_us = reqs[i].lock_us;
		requests[i].cost = reqs[i].cost;
		requests[i].shadow = reqs[i].shadow;
	}
	c = gcra_decide_all(requests, n, now, decisions);

	open_item();
	printf("{\"name\": \"%s\", \"now_us\": \"%" PRId64 "\", \"requests\": [", name, now);
	for (i = 0; i < n; i++)
	{
		printf("%s\n      {\"rate\": %s, \"burst\": %d, \"cost\": %d, \"shadow\": %s",
			   i ? "," : "", rate_text(reqs[i].rate), reqs[i].burst, reqs[i].cost,
			   reqs[i].shadow ? "true" : "false");
		print_lockout(&requests[i].limit);
		printf(", \"bucket\": ");
		print_bucket(&requests[i].bucket);
		printf(",\n       \"expect\": ");
		print_decision(&decisions[i]);
		printf("}");
	}
	printf("],\n     \"expect\": {\"allowed\": %s, \"remaining\": %d, \"retry_known\": %s, "
		   "\"retry_after_us\": \"%" PRId64 "\", \"reset_after_us\": \"%" PRId64 "\", \"binding\": %d}}",
		   c.allowed ? "true" : "false", c.remaining, c.retry_known ? "true" : "false",
		   c.retry_after_us, c.reset_after_us, c.binding);
}

#define LEN(a) ((int) (sizeof(a) / sizeof((a)[0])))

int
main(void)
{
	printf("{\n  \"generated_by\": \"test/vectors/gcra_vectors.c from include/gcra.h\",\n");
	printf("  \"max_time_us\": \"%" PRId64 "\",\n", PG_MAX_TIME_US);

	printf("  \"limits\": [");
	first_item = true;
	limit_case(1.0, 3, NOW0);
	limit_case(10.0 / 900, 10, NOW0);
	limit_case(3.0, 1, NOW0);		/* 333333.33 us */
	limit_case(600000.0, 5, NOW0);	/* 1.67 us rounds to 2 */
	limit_case(2000000.0 / 3.0, 5, NOW0);	/* 1.5 us halves away from zero: 2 */
	limit_case(400000.0, 5, NOW0);	/* 2.5 us halves away from zero: 3, not to even */
	limit_case(1000000.0, 1, NOW0);
	limit_case(1000000.5, 1, NOW0);
	limit_case(0.0, 1, NOW0);
	limit_case(-1.0, 1, NOW0);
	limit_case(0.5 / 0.0, 1, NOW0);	/* infinity */
	limit_case(0.0 / 0.0, 1, NOW0); /* NaN */
	limit_case(1.0, 0, NOW0);
	limit_case(1.0, -5, NOW0);
	limit_case(1e-9, 2147483647, NOW0);
	limit_case(1e-6, 10, NOW0);
	limit_case(1.0, 2147483647, NOW0);
	limit_case(1.0, 2147483647, PG_MAX_TIME_US - SEC);
	printf("\n  ],\n");

	printf("  \"lockout_limits\": [");
	first_item = true;
	lockout_limit_case(900 * SEC, 2.0, 86400 * SEC, NOW0);
	lockout_limit_case(SEC, 1.0, 0, NOW0);
	lockout_limit_case(GCRA_MAX_LOCKOUT_US, 100.0, 0, NOW0);
	lockout_limit_case(SEC - 1, 1.0, 0, NOW0);
	lockout_limit_case(GCRA_MAX_LOCKOUT_US + 1, 1.0, 0, NOW0);
	lockout_limit_case(2 * SEC, 1.0, SEC, NOW0);
	lockout_limit_case(SEC, 1.0, GCRA_MAX_LOCKOUT_US + 1, NOW0);
	lockout_limit_case(SEC, 0.999, 0, NOW0);
	lockout_limit_case(SEC, 100.5, 0, NOW0);
	lockout_limit_case(SEC, 0.0 / 0.0, 0, NOW0);
	lockout_limit_case(SEC, 1.0, 10 * SEC, PG_MAX_TIME_US - 20 * SEC);
	lockout_limit_case(SEC, 1.0, 10 * SEC, PG_MAX_TIME_US - 20 * SEC + 1);
	printf("\n  ],\n");

	printf("  \"sequences\": [");
	first_item = true;
	{
		Step		burst_then_deny[] = {
			{0, 1.0, 3, 1, NO_LOCKOUT}, {0, 1.0, 3, 1, NO_LOCKOUT}, {0, 1.0, 3, 1, NO_LOCKOUT}, {0, 1.0, 3, 1, NO_LOCKOUT},
			{SEC / 2, 1.0, 3, 1, NO_LOCKOUT}, {SEC, 1.0, 3, 1, NO_LOCKOUT}, {SEC, 1.0, 3, 1, NO_LOCKOUT}, {10 * SEC, 1.0, 3, 1, NO_LOCKOUT},
		};
		Step		costs[] = {
			{0, 2.0, 10, 4, NO_LOCKOUT}, {0, 2.0, 10, 5, NO_LOCKOUT}, {0, 2.0, 10, 2, NO_LOCKOUT}, {0, 2.0, 10, 1, NO_LOCKOUT},
			{1, 2.0, 10, 11, NO_LOCKOUT}, {2, 2.0, 10, 0, NO_LOCKOUT}, {3 * SEC, 2.0, 10, 10, NO_LOCKOUT}, {3 * SEC, 2.0, 10, 6, NO_LOCKOUT},
		};
		Step		peeks[] = {
			{0, 1.0, 2, 0, NO_LOCKOUT}, {0, 1.0, 2, 2, NO_LOCKOUT}, {0, 1.0, 2, 0, NO_LOCKOUT}, {SEC / 3, 1.0, 2, 0, NO_LOCKOUT},
			{SEC / 3, 1.0, 2, 1, NO_LOCKOUT}, {SEC, 1.0, 2, 1, NO_LOCKOUT},
		};
		Step		raised[] = {
			{0, 1.0 / 60, 5, 5, NO_LOCKOUT}, {SEC, 1.0 / 60, 5, 1, NO_LOCKOUT},
			{2 * SEC, 1.0 / 6, 50, 1, NO_LOCKOUT},	/* ten times the budget: debt rescales in cells */
			{2 * SEC, 1.0 / 6, 50, 40, NO_LOCKOUT}, {2 * SEC, 1.0 / 6, 50, 10, NO_LOCKOUT},
		};
		Step		lowered[] = {
			{0, 10.0, 100, 60, NO_LOCKOUT}, {0, 1.0, 10, 1, NO_LOCKOUT}, /* debt capped at the new tau: written on denial */
			{0, 1.0, 10, 1, NO_LOCKOUT}, {SEC, 1.0, 10, 1, NO_LOCKOUT}, {SEC, 10.0, 100, 1, NO_LOCKOUT},
		};
		Step		passed[] = {
			{0, 5.0, 2, 2, NO_LOCKOUT}, {SEC, 5.0, 2, 1, NO_LOCKOUT}, {SEC, 5.0, 2, 1, NO_LOCKOUT}, {SEC, 5.0, 2, 1, NO_LOCKOUT},
			{SEC, 50.0, 2, 1, NO_LOCKOUT},
		};
		Step		fractional[] = {
			{0, 3.0, 3, 1, NO_LOCKOUT}, {1, 3.0, 3, 1, NO_LOCKOUT}, {2, 3.0, 3, 1, NO_LOCKOUT}, {3, 3.0, 3, 1, NO_LOCKOUT},
			{333333, 3.0, 3, 1, NO_LOCKOUT}, {333334, 3.0, 3, 1, NO_LOCKOUT}, {333335, 7.0, 3, 1, NO_LOCKOUT},
			{333336, 7.0, 3, 1, NO_LOCKOUT}, {700000, 7.0, 3, 2, NO_LOCKOUT},
		};
		Step		slow[] = {
			{0, 1e-6, 10, 3, NO_LOCKOUT}, {SEC, 1e-5, 10, 1, NO_LOCKOUT}, {2 * SEC, 1e-3, 1000, 1, NO_LOCKOUT},
			{3 * SEC, 1e-6, 10, 1, NO_LOCKOUT}, {4 * SEC, 1e-6, 10, 7, NO_LOCKOUT}, {5 * SEC, 1e-6, 10, 1, NO_LOCKOUT},
		};
		Step		fast[] = {
			{0, 1000000.0, 3, 1, NO_LOCKOUT}, {0, 1000000.0, 3, 1, NO_LOCKOUT}, {0, 1000000.0, 3, 1, NO_LOCKOUT},
			{0, 1000000.0, 3, 1, NO_LOCKOUT}, {1, 1000000.0, 3, 1, NO_LOCKOUT}, {1, 600000.0, 3, 1, NO_LOCKOUT},
			{1, 600000.0, 3, 1, NO_LOCKOUT}, {2, 600000.0, 3, 2, NO_LOCKOUT},
		};
		Step		over_burst[] = {
			{0, 1.0, 3, 4, NO_LOCKOUT}, {0, 1.0, 3, 1, NO_LOCKOUT}, {0, 1.0, 3, 4, NO_LOCKOUT}, {0, 1.0, 2, 4, NO_LOCKOUT}, {0, 1.0, 3, 3, NO_LOCKOUT},
		};

		sequence("burst then deny, then refill", burst_then_deny, LEN(burst_then_deny));
		sequence("costs", costs, LEN(costs));
		sequence("peeks never write", peeks, LEN(peeks));
		sequence("a raised limit carries the fill level in cells", raised, LEN(raised));
		sequence("a lowered limit caps the debt and writes it on a denial", lowered, LEN(lowered));
		sequence("a passed bucket is an absent one", passed, LEN(passed));
		sequence("fractional emission intervals", fractional, LEN(fractional));
		sequence("slow rates: 128-bit rescaling", slow, LEN(slow));
		sequence("fast rates round to whole microseconds", fast, LEN(fast));
		sequence("cost above burst is never allowed", over_burst, LEN(over_burst));
#define SIGN_IN(offset, cost) {(offset) * SEC, 1.0 / 60, 3, cost, 900 * SEC, 2.0, 3600 * SEC}
		Step		lockout_grows[] = {
			SIGN_IN(0, 1), SIGN_IN(0, 1), SIGN_IN(0, 1),
			SIGN_IN(0, 1),		/* a lockout of 900 s starts */
			SIGN_IN(100, 1), SIGN_IN(100, 0), SIGN_IN(100, 4), SIGN_IN(899, 1),
			SIGN_IN(900, 1), SIGN_IN(900, 1), SIGN_IN(900, 1),
			SIGN_IN(900, 1),	/* within 900 s of the last one's end: 1800 s */
			SIGN_IN(2700, 1), SIGN_IN(2700, 1), SIGN_IN(2700, 1),
			SIGN_IN(2700, 1),	/* 3600 s */
			SIGN_IN(6300, 1), SIGN_IN(6300, 1), SIGN_IN(6300, 1),
			SIGN_IN(6300, 1),	/* 7200 s, capped at 3600 s */
			SIGN_IN(13500, 1), SIGN_IN(13500, 1), SIGN_IN(13500, 1),
			SIGN_IN(13500, 1),	/* forgiven after as long as it lasted: 900 s */
			SIGN_IN(13500, 4),	/* locked: retry_after known */
		};
#undef SIGN_IN
		Step		lockout_writes_nothing[] = {
			{0, 1.0, 3, 1, 10 * SEC, 1.0, 0}, {0, 1.0, 3, 1, 10 * SEC, 1.0, 0},
			{0, 1.0, 3, 1, 10 * SEC, 1.0, 0}, {0, 1.0, 3, 1, 10 * SEC, 1.0, 0},
			{SEC, 0.5, 2, 1, 10 * SEC, 1.0, 0},	/* locked: the new T waits */
			{SEC, 0.5, 2, 0, 10 * SEC, 1.0, 0},
			{10 * SEC, 0.5, 2, 1, 10 * SEC, 1.0, 0}, {10 * SEC, 0.5, 2, 1, 10 * SEC, 1.0, 0},
			{10 * SEC, 0.5, 2, 1, 10 * SEC, 1.0, 0},	/* again, within 10 s: 10 s */
		};
		Step		lockout_removed[] = {
			{0, 1.0, 1, 1, 60 * SEC, 1.0, 0}, {0, 1.0, 1, 1, 60 * SEC, 1.0, 0},
			{2 * SEC, 1.0, 1, 1, 0, 1.0, 0},	/* no lockout: GCRA decides, the lock kept */
			{2 * SEC, 1.0, 1, 1, 0, 1.0, 0},	/* denied, no lockout */
			{3 * SEC, 1.0, 1, 1, 60 * SEC, 1.0, 0},	/* set again: the lock applies again */
			{60 * SEC, 1.0, 1, 1, 60 * SEC, 1.0, 0},
		};
		Step		lockout_over_burst[] = {
			{0, 1.0, 2, 3, SEC, 1.0, 0}, {0, 1.0, 2, 2, SEC, 1.0, 0},
			{0, 1.0, 2, 3, SEC, 1.0, 0},	/* cost above burst: no lockout */
			{0, 1.0, 2, 1, SEC, 1.0, 0},	/* a lockout */
			{1, 1.0, 2, 3, SEC, 1.0, 0},	/* locked: retry known */
		};
		Step		lockout_fractional_growth[] = {
			{0, 1.0, 1, 1, SEC, 1.1, 10 * SEC}, {0, 1.0, 1, 1, SEC, 1.1, 10 * SEC},
			{SEC, 1.0, 1, 1, SEC, 1.1, 10 * SEC}, {SEC, 1.0, 1, 1, SEC, 1.1, 10 * SEC},
			{2100000, 1.0, 1, 1, SEC, 1.1, 10 * SEC}, {2100000, 1.0, 1, 1, SEC, 1.1, 10 * SEC},
			{3310000, 1.0, 1, 1, SEC, 1.1, 10 * SEC}, {3310000, 1.0, 1, 1, SEC, 1.1, 10 * SEC},
			{3310000 + 1331000 - 1, 1.0, 1, 1, SEC, 1.1, 10 * SEC},
		};

		sequence("a lockout starts, grows, is capped and forgiven", lockout_grows, LEN(lockout_grows));
		sequence("a locked call writes nothing, not even a normalisation",
				 lockout_writes_nothing, LEN(lockout_writes_nothing));
		sequence("a lockout removed from the policy is ignored, then applies again",
				 lockout_removed, LEN(lockout_removed));
		sequence("cost above burst starts no lockout", lockout_over_burst, LEN(lockout_over_burst));
		/* 1.7 is just below 17/10: exact arithmetic would floor to 1699999 */
		Step		lockout_rounded_growth[] = {
			{0, 1.0, 1, 1, SEC, 1.7, 10 * SEC}, {0, 1.0, 1, 1, SEC, 1.7, 10 * SEC},
			{SEC, 1.0, 1, 1, SEC, 1.7, 10 * SEC}, {SEC, 1.0, 1, 1, SEC, 1.7, 10 * SEC},
			{2700000, 1.0, 1, 1, SEC, 1.7, 10 * SEC}, {2700000, 1.0, 1, 1, SEC, 1.7, 10 * SEC},
			{5590000, 1.0, 1, 1, SEC, 1.7, 10 * SEC}, {5590000, 1.0, 1, 1, SEC, 1.7, 10 * SEC},
		};

		sequence("lockout growth as one double product, floored",
				 lockout_fractional_growth, LEN(lockout_fractional_growth));
		/* 3000000 * 1.1 is 3300000.0000000005: floored, not rounded up */
		Step		lockout_floored_growth[] = {
			{0, 1.0, 1, 1, 3 * SEC, 1.1, 10 * SEC}, {0, 1.0, 1, 1, 3 * SEC, 1.1, 10 * SEC},
			{3 * SEC, 1.0, 1, 1, 3 * SEC, 1.1, 10 * SEC}, {3 * SEC, 1.0, 1, 1, 3 * SEC, 1.1, 10 * SEC},
		};

		/* 1000005 * 1.1 is 1100005.5: floored, not rounded to nearest */
		Step		lockout_half_growth[] = {
			{0, 1.0, 1, 1, 1000005, 1.1, 10 * SEC}, {0, 1.0, 1, 1, 1000005, 1.1, 10 * SEC},
			{1000005, 1.0, 1, 1, 1000005, 1.1, 10 * SEC}, {1000005, 1.0, 1, 1, 1000005, 1.1, 10 * SEC},
		};

		sequence("lockout growth floored, not rounded to nearest",
				 lockout_half_growth, LEN(lockout_half_growth));
		sequence("lockout growth floored, never rounded up",
				 lockout_floored_growth, LEN(lockout_floored_growth));
		sequence("lockout growth rounded as a double before the floor",
				 lockout_rounded_growth, LEN(lockout_rounded_growth));
	}
	printf("\n  ],\n");

	printf("  \"take_all\": [");
	first_item = true;
	{
		AllRequest	fresh[] = {{1.0, 5, 1, false, false, 0, 1.0, NO_LOCKOUT, 0, 0}, {1.0 / 60, 3, 1, false, false, 0, 1.0, NO_LOCKOUT, 0, 0}};
		AllRequest	one_denied[] = {
			{1.0, 5, 1, false, true, 2 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0 / 60, 3, 1, false, true, 180 * SEC, 1.0 / 60, NO_LOCKOUT, 0, 0},
			{2.0, 4, 2, false, false, 0, 2.0, NO_LOCKOUT, 0, 0},
		};
		AllRequest	shadow_denied[] = {
			{1.0, 5, 1, false, true, 2 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0 / 60, 3, 1, true, true, 180 * SEC, 1.0 / 60, NO_LOCKOUT, 0, 0},
		};
		AllRequest	unknown_retry[] = {
			{1.0, 5, 1, false, true, 5 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 2, 3, false, false, 0, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 5, 1, false, true, 5 * SEC, 1.0, NO_LOCKOUT, 0, 0},
		};
		AllRequest	normalised_on_denial[] = {
			{1.0, 2, 1, false, true, 10 * SEC, 0.5, NO_LOCKOUT, 0, 0},	/* lowered: debt capped and stored */
			{1.0, 2, 1, false, true, 2 * SEC, 1.0, NO_LOCKOUT, 0, 0},	/* denied */
			{1.0, 9, 1, false, true, 1 * SEC, 1.0, NO_LOCKOUT, 0, 0},	/* allowed, then not spent */
		};
		AllRequest	peeks_and_ties[] = {
			{1.0, 4, 0, false, true, 2 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 4, 1, false, true, 1 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 4, 0, false, false, 0, 1.0, NO_LOCKOUT, 0, 0},
		};
		AllRequest	largest_retry[] = {
			{1.0, 3, 1, false, true, 4 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 3, 2, false, true, 3 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{0.5, 3, 1, false, true, 7 * SEC, 0.5, NO_LOCKOUT, 0, 0},
		};

		take_all("fresh buckets", fresh, LEN(fresh));
		take_all("one denied spends nothing", one_denied, LEN(one_denied));
		take_all("a shadow denial denies nothing", shadow_denied, LEN(shadow_denied));
		take_all("an unknown retry binds first", unknown_retry, LEN(unknown_retry));
		take_all("normalisations are stored on a denial", normalised_on_denial, LEN(normalised_on_denial));
		take_all("peeks and ties", peeks_and_ties, LEN(peeks_and_ties));
		take_all("the largest retry binds", largest_retry, LEN(largest_retry));

		AllRequest	lockout_starts[] = {
			{1.0, 5, 1, false, false, 0, 1.0, NO_LOCKOUT, 0, 0},
			{1.0 / 60, 3, 1, false, true, 180 * SEC, 1.0 / 60, 900 * SEC, 2.0, 3600 * SEC, 0, 0},
		};
		AllRequest	locked_binds[] = {
			{1.0, 3, 1, false, true, 5 * SEC, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 3, 4, false, true, 0, 1.0, 60 * SEC, 1.0, 0, 30 * SEC, 60 * SEC},
			{1.0, 3, 1, false, true, 3 * SEC, 1.0, 60 * SEC, 1.0, 0, 40 * SEC, 60 * SEC},
		};
		AllRequest	locked_peek[] = {
			{1.0, 5, 1, false, false, 0, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 3, 0, false, true, 0, 1.0, 60 * SEC, 1.0, 0, 30 * SEC, 60 * SEC},
		};
		AllRequest	shadow_lockout[] = {
			{1.0, 5, 1, false, false, 0, 1.0, NO_LOCKOUT, 0, 0},
			{1.0, 3, 1, true, true, 3 * SEC, 1.0, 60 * SEC, 2.0, 600 * SEC, -10 * SEC, 60 * SEC},
		};

		take_all("a lockout started in a call denies it and is written", lockout_starts, LEN(lockout_starts));
		take_all("a locked request binds with its lock's remainder", locked_binds, LEN(locked_binds));
		take_all("a peek at a locked key denies nothing", locked_peek, LEN(locked_peek));
		take_all("a shadow lockout is written and denies nothing", shadow_lockout, LEN(shadow_lockout));
	}
	printf("\n  ]\n}\n");
	return 0;
}
