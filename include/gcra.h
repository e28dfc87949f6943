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
	GCRA_TOLERANCE_TOO_LARGE,	/* now + 2 * tau leaves the time range */
	GCRA_BAD_LOCKOUT			/* outside 1 s .. 366 days, growth 1 .. 100 */
} GcraError;

/* The longest lockout, and the largest growth, a policy may ask for. */
#define GCRA_MAX_LOCKOUT_US (INT64_C(366) * 86400 * 1000000)
#define GCRA_MIN_LOCKOUT_US INT64_C(1000000)
#define GCRA_MAX_LOCKOUT_GROWTH 100.0

/*
 * A limit as the arithmetic sees it: emission interval T and tolerance tau,
 * and the lockout of a policy that has one (lockout_us = 0: none).
 */
typedef struct GcraLimit
{
	int64_t		interval_us;	/* T = max(1, round(1e6 / rate)) */
	int64_t		tolerance_us;	/* tau = T * burst */
	int32_t		burst;
	int64_t		lockout_us;		/* the first lockout's length; 0: none */
	int64_t		lockout_max_us; /* the longest one */
	double		lockout_growth; /* each repeat offence's factor */
} GcraLimit;

/*
 * A stored bucket; present = false means no row (the same as a passed tat
 * and no lockout).  lock_until_us and lock_us are 0 when the key was never
 * locked.
 */
typedef struct GcraBucket
{
	bool		present;
	int64_t		tat_us;
	int64_t		interval_us;	/* the T the bucket was last written with */
	int64_t		lock_until_us;	/* locked while now < lock_until_us */
	int64_t		lock_us;		/* the length of the last lockout */
} GcraBucket;

typedef struct GcraDecision
{
	bool		allowed;
	bool		store;			/* write new_tat_us, limit T, new_lock_* back */
	bool		normalised;		/* a live bucket's debt or T changed */
	bool		locked;			/* the answer is a lockout's */
	bool		lock_started;	/* this request started that lockout */
	int64_t		new_tat_us;
	int64_t		new_lock_until_us;	/* as stored, or the new lockout's */
	int64_t		new_lock_us;
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
		case GCRA_BAD_LOCKOUT:
			return "lockout must be 1 second to 366 days, lockout_growth 1 to 100, and lockout_max from lockout to 366 days";
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
	limit->lockout_us = 0;
	limit->lockout_max_us = 0;
	limit->lockout_growth = 1.0;
	if (__builtin_mul_overflow(limit->interval_us, (int64_t) burst, &tolerance) ||
		__builtin_mul_overflow(tolerance, (int64_t) 2, &horizon) ||
		__builtin_add_overflow(now_us, horizon, &horizon) ||
		horizon > max_time_us)
		return GCRA_TOLERANCE_TOO_LARGE;
	limit->tolerance_us = tolerance;
	return GCRA_OK;
}

/*
 * Give limit a lockout of lockout_us, growing by growth up to max_us (a
 * policy's lockout, lockout_growth and lockout_max; max_us 0 means
 * lockout_us).  now + 2 * max_us must stay inside the time range, so that
 * a lockout's end and its forgiveness fit.
 */
static inline GcraError
gcra_lockout_init(GcraLimit *limit, int64_t lockout_us, double growth,
				  int64_t max_us, int64_t now_us, int64_t max_time_us)
{
	if (max_us == 0)
		max_us = lockout_us;
	if (lockout_us < GCRA_MIN_LOCKOUT_US || lockout_us > GCRA_MAX_LOCKOUT_US ||
		max_us < lockout_us || max_us > GCRA_MAX_LOCKOUT_US ||
		!(growth >= 1.0 && growth <= GCRA_MAX_LOCKOUT_GROWTH))
		return GCRA_BAD_LOCKOUT;
	if (now_us > max_time_us - 2 * max_us)
		return GCRA_TOLERANCE_TOO_LARGE;
	limit->lockout_us = lockout_us;
	limit->lockout_max_us = max_us;
	limit->lockout_growth = growth;
	return GCRA_OK;
}

/*
 * Whether a bucket is locked at now.  A lockout lasts at least a second, so
 * lock_us = 0 is "never locked" whatever the time: lock_until_us = 0 is also
 * an instant (2000-01-01), and a call before it must not read as locked.
 */
static inline bool
gcra_bucket_locked(const GcraBucket *bucket, int64_t now_us)
{
	return bucket->present && bucket->lock_us > 0 &&
		now_us < bucket->lock_until_us;
}

/*
 * The length of a lockout that starts at now: the last one's times growth
 * (one IEEE double multiplication, then floor), between lockout and
 * lockout_max, when the key offends again no longer after its last lockout
 * ended than that lockout lasted; else the first length.
 */
static inline int64_t
gcra_lockout_length(const GcraLimit *limit, const GcraBucket *bucket,
					int64_t now_us)
{
	int64_t		grown;

	if (!(bucket->present && bucket->lock_until_us <= now_us &&
		  now_us < bucket->lock_until_us + bucket->lock_us))
		return limit->lockout_us;
	grown = (int64_t) floor((double) bucket->lock_us * limit->lockout_growth);
	if (grown < limit->lockout_us)
		grown = limit->lockout_us;
	return grown > limit->lockout_max_us ? limit->lockout_max_us : grown;
}

/*
 * Whether a bucket is the same as an absent one at now, so that it may be
 * deleted: its tat has passed, and so has the time during which a new
 * offence would lengthen its last lockout.
 */
static inline bool
gcra_bucket_forgotten(const GcraBucket *bucket, int64_t now_us)
{
	return !bucket->present ||
		(bucket->tat_us <= now_us &&
		 (bucket->lock_us == 0 ||
		  bucket->lock_until_us + bucket->lock_us <= now_us));
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
 * The answer of a locked key: nothing left until the lock ends, and full
 * again once both the lock and the tat have passed.
 */
static inline void
gcra_report_locked(GcraDecision *d, int64_t now_us, int64_t tat_used,
				   int64_t lock_until)
{
	d->locked = true;
	d->new_tat_us = tat_used;
	d->remaining = 0;
	d->reset_after_us = (tat_used > lock_until ? tat_used : lock_until) - now_us;
}

/*
 * Decide a request of cost at now against bucket under limit.
 *
 * The debt (tat - now) of a live bucket is first carried over to the limit
 * of this call in cells, not in time, and capped at tau; when that changes a
 * live bucket, the decision stores it even when it denies, so a lowered
 * limit cannot leak requests and the rescaling happens once.
 *
 * Under a limit with a lockout, a key locked at now is denied (a peek
 * allowed) without spending or storing anything, not even the normalised
 * debt; a denial of a request the burst can hold starts a lockout, stored
 * with the bucket.  Without one, a stored lock is kept and ignored.
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
	d.new_lock_until_us = bucket->present ? bucket->lock_until_us : 0;
	d.new_lock_us = bucket->present ? bucket->lock_us : 0;

	if (limit->lockout_us > 0 && gcra_bucket_locked(bucket, now_us))
	{
		d.allowed = cost == 0;
		d.retry_known = true;
		d.retry_after_us = cost == 0 ? 0 : bucket->lock_until_us - now_us;
		gcra_report_locked(&d, now_us, tat_used, bucket->lock_until_us);
		return d;
	}

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
	if (!d.allowed && d.retry_known && limit->lockout_us > 0)
	{
		int64_t		length = gcra_lockout_length(limit, bucket, now_us);

		d.lock_started = true;
		d.store = true;
		d.new_lock_until_us = now_us + length;
		d.new_lock_us = length;
		d.retry_after_us = length;
		gcra_report_locked(&d, now_us, tat_used, d.new_lock_until_us);
		return d;
	}
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
