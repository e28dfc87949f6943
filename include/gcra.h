/*
 * gcra.h
 *		The GCRA decision arithmetic of ratelimit, in integer microseconds.
 *
 * This header is the single definition of how a rate-limit decision is made.
 * The server (rl_take) and the C client (ratelimit_client.h) both include it,
 * so a local decision and a database decision agree by construction.  It has
 * no PostgreSQL includes and no state: callers pass the stored bucket in and
 * store what the decision tells them to.
 *
 * Times are microseconds on any monotonic-enough epoch chosen by the caller
 * (the server uses PostgreSQL's timestamptz epoch).  "tat" is the theoretical
 * arrival time: the bucket is full again once now reaches it.
 */
#ifndef RATELIMIT_GCRA_H
#define RATELIMIT_GCRA_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifndef __SIZEOF_INT128__
#error "gcra.h needs a compiler with 128-bit integers for exact limit changes"
#endif

/* Rates above this many requests per second are refused. */
#define GCRA_MAX_RATE 1000000.0

typedef enum GcraError
{
	GCRA_OK = 0,
	GCRA_BAD_RATE,				/* not finite, <= 0, or above GCRA_MAX_RATE */
	GCRA_BAD_BURST,				/* < 1 */
	GCRA_BAD_COST,				/* < 0 */
	GCRA_TOLERANCE_TOO_LARGE	/* now + 2 * tau leaves the time range */
} GcraError;

/* A limit as the arithmetic sees it: emission interval T and tolerance tau. */
typedef struct GcraLimit
{
	int64_t		interval_us;	/* T = max(1, round(1e6 / rate)) */
	int64_t		tolerance_us;	/* tau = T * burst */
	int32_t		burst;
} GcraLimit;

/* A stored bucket; present = false means no row (the same as a passed tat). */
typedef struct GcraBucket
{
	bool		present;
	int64_t		tat_us;
	int64_t		interval_us;	/* the T the bucket was last written with */
} GcraBucket;

typedef struct GcraDecision
{
	bool		allowed;
	bool		store;			/* write (new_tat_us, limit T) back */
	bool		normalised;		/* a live bucket's debt or T changed */
	int64_t		new_tat_us;
	int32_t		remaining;
	bool		retry_known;	/* false when cost > burst: never allowed */
	int64_t		retry_after_us; /* 0 when allowed */
	int64_t		reset_after_us;
} GcraDecision;

/* Why an argument was refused, naming the argument, for server and client. */
static inline const char *
gcra_error_message(GcraError error)
{
	switch (error)
	{
		case GCRA_OK:
			return "no error";
		case GCRA_BAD_RATE:
			return "rate must be a finite number of requests per second above 0 and at most 1000000";
		case GCRA_BAD_BURST:
			return "burst must be at least 1";
		case GCRA_BAD_COST:
			return "cost must not be negative";
		case GCRA_TOLERANCE_TOO_LARGE:
			return "burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range";
	}
	return "unknown error";
}

/*
 * Turn (rate, burst) into a limit and check that every intermediate of a
 * decision at time now fits: now + 2 * tau <= max_time_us.
 */
static inline GcraError
gcra_limit_init(GcraLimit *limit, double rate, int32_t burst, int64_t now_us,
				int64_t max_time_us)
{
	double		interval;
	int64_t		tolerance;
	int64_t		horizon;

	if (!isfinite(rate) || rate <= 0.0 || rate > GCRA_MAX_RATE)
		return GCRA_BAD_RATE;
	if (burst < 1)
		return GCRA_BAD_BURST;

	/* round() halves away from zero; compare as double before converting */
	interval = round(1e6 / rate);
	if (interval < 1.0)
		interval = 1.0;
	if (interval >= 4611686018427387904.0)	/* 2^62 */
		return GCRA_TOLERANCE_TOO_LARGE;

	limit->interval_us = (int64_t) interval;
	limit->burst = burst;
	if (__builtin_mul_overflow(limit->interval_us, (int64_t) burst, &tolerance) ||
		__builtin_mul_overflow(tolerance, (int64_t) 2, &horizon) ||
		__builtin_add_overflow(now_us, horizon, &horizon) ||
		horizon > max_time_us)
		return GCRA_TOLERANCE_TOO_LARGE;
	limit->tolerance_us = tolerance;
	return GCRA_OK;
}

static inline int64_t
gcra_floor_div(int64_t a, int64_t b)
{
	int64_t		q = a / b;

	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* The bucket after a decision: its tat, remaining and reset_after. */
static inline void
gcra_report(GcraDecision *d, const GcraLimit *limit, int64_t now_us,
			int64_t tat_after)
{
	int64_t		remaining = gcra_floor_div(now_us + limit->tolerance_us - tat_after,
										   limit->interval_us);

	d->new_tat_us = tat_after;
	d->remaining = (int32_t) (remaining < 0 ? 0 :
							  remaining > limit->burst ? limit->burst : remaining);
	d->reset_after_us = tat_after > now_us ? tat_after - now_us : 0;
}

/*
 * Decide a request of cost at now against bucket under limit.
 *
 * The debt (tat - now) of a live bucket is first carried over to the limit
 * of this call in cells, not in time, and capped at tau; when that changes a
 * live bucket, the decision stores it even when it denies, so a lowered
 * limit cannot leak requests and the rescaling happens once.
 */
static inline GcraDecision
gcra_decide(const GcraLimit *limit, const GcraBucket *bucket, int64_t now_us,
			int32_t cost)
{
	GcraDecision d = {0};
	const int64_t T = limit->interval_us;
	const int64_t tau = limit->tolerance_us;
	bool		live = bucket->present && bucket->tat_us >= now_us;
	int64_t		debt = 0;
	bool		normalised = false;
	int64_t		tat_used;
	int64_t		tat_after;

	if (live)
	{
		/* in 128 bits, capped before narrowing: neither fits in 64 */
		__int128	stored_debt = (__int128) bucket->tat_us - now_us;
		__int128	rescaled = stored_debt * T / bucket->interval_us;

		debt = rescaled > tau ? tau : (int64_t) rescaled;
		normalised = debt != stored_debt || bucket->interval_us != T;
	}
	tat_used = now_us + debt;

	if (cost == 0)
	{
		/* a peek: always allowed, never written */
		d.allowed = true;
		d.retry_known = true;
		tat_after = tat_used;
	}
	else if (cost > limit->burst)
	{
		d.allowed = false;
		d.retry_known = false;
		tat_after = tat_used;
	}
	else
	{
		/* cost * T <= tau and tat_used <= now + tau: no overflow */
		int64_t		new_tat = tat_used + (int64_t) cost * T;

		d.allowed = new_tat - now_us <= tau;
		d.retry_known = true;
		if (!d.allowed)
			d.retry_after_us = new_tat - now_us - tau;
		tat_after = d.allowed ? new_tat : tat_used;
	}

	d.normalised = normalised;
	d.store = cost > 0 && (d.allowed || normalised);
	gcra_report(&d, limit, now_us, tat_after);
	return d;
}

/* One request of a decision over several buckets. */
typedef struct GcraRequest
{
	GcraLimit	limit;
	GcraBucket	bucket;
	int32_t		cost;
	bool		shadow;			/* decided and stored, but never denies */
} GcraRequest;

/* Most requests one decision over several buckets takes. */
#define GCRA_MAX_REQUESTS 16

/* The one answer of a decision over several buckets. */
typedef struct GcraCombined
{
	bool		allowed;
	int32_t		remaining;		/* the least */
	bool		retry_known;	/* false when a denied request has cost > burst */
	int64_t		retry_after_us; /* 0 when allowed, else the largest denied */
	int64_t		reset_after_us; /* the largest */
	int			binding;		/* index of the request the answer is about */
} GcraCombined;

/*
 * Combine the decisions of 1 to GCRA_MAX_REQUESTS requests.  A shadow
 * request's would-be denial denies nothing.  The binding request: when
 * denied, the denied one with the largest retry_after, an unknown one first;
 * when allowed, the one with the least remaining; ties go to the first in
 * the array.
 */
static inline GcraCombined
gcra_combine(const GcraDecision *d, const bool *shadow, int n)
{
	GcraCombined c = {0};
	int			i;

	c.allowed = true;
	c.retry_known = true;
	c.remaining = d[0].remaining;
	c.reset_after_us = d[0].reset_after_us;
	for (i = 0; i < n; i++)
	{
		if (d[i].remaining < c.remaining)
			c.remaining = d[i].remaining;
		if (d[i].reset_after_us > c.reset_after_us)
			c.reset_after_us = d[i].reset_after_us;
		if (!d[i].allowed && !shadow[i])
		{
			bool		binds;

			if (c.allowed)
				binds = true;
			else if (!c.retry_known)
				binds = false;
			else
				binds = !d[i].retry_known || d[i].retry_after_us > c.retry_after_us;
			c.allowed = false;
			if (binds)
			{
				c.binding = i;
				c.retry_known = d[i].retry_known;
				c.retry_after_us = d[i].retry_known ? d[i].retry_after_us : 0;
			}
		}
	}
	if (c.allowed)
	{
		/* the first with the least remaining */
		for (i = 0; d[i].remaining != c.remaining; i++)
			;
		c.binding = i;
	}
	return c;
}

/*
 * Decide 1 to GCRA_MAX_REQUESTS requests, each against its own bucket, all
 * or nothing: every request is decided at one now; when an enforced request
 * is denied, the others are reported and stored as if they had not been
 * made (nothing is spent), but a live bucket that normalising changed is
 * still stored, as a denial of gcra_decide stores it.  A shadow request is
 * decided and stored as an enforced one, and its own denial denies nothing.
 */
static inline GcraCombined
gcra_decide_all(const GcraRequest *requests, int n, int64_t now_us,
				GcraDecision *decisions)
{
	bool		shadow[GCRA_MAX_REQUESTS];
	bool		allowed = true;
	int			i;

	for (i = 0; i < n; i++)
	{
		decisions[i] = gcra_decide(&requests[i].limit, &requests[i].bucket,
								   now_us, requests[i].cost);
		shadow[i] = requests[i].shadow;
		if (!decisions[i].allowed && !shadow[i])
			allowed = false;
	}
	if (!allowed)
	{
		for (i = 0; i < n; i++)
		{
			GcraDecision *d = &decisions[i];
			const GcraRequest *r = &requests[i];

			if (!d->allowed || r->cost == 0)
				continue;
			/* not spent: back to the bucket as normalised */
			d->store = d->normalised;
			gcra_report(d, &r->limit, now_us,
						d->new_tat_us - (int64_t) r->cost * r->limit.interval_us);
		}
	}
	return gcra_combine(decisions, shadow, n);
}

#endif							/* RATELIMIT_GCRA_H */
