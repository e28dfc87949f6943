/*
 * ratelimit_client.h
 *		The C client of ratelimit: rate-limit decisions from the database,
 *		with a local pre-check, a deadline, and a per-process fallback that
 *		keeps the limit while the database is down or slow.
 *
 * A single-header library.  Any file may include it for the declarations.
 * Exactly one C file of the program defines RATELIMIT_CLIENT_IMPLEMENTATION
 * before including it, as that file's first include (the implementation asks
 * for POSIX.1-2008 declarations), and the program links libpq and pthreads:
 *
 *		cc app.c -Iinclude $(pkg-config --cflags --libs libpq) -pthread -lm
 *
 * gcra.h must sit next to this header: the client decides with the same
 * arithmetic as the server's rl_take, never with a copy of it.
 *
 * How rl_client_take decides:
 *	1. the arguments are checked as rl_take checks them; bad use is an error
 *	   status with a message, never a decision;
 *	2. while the database is in its backoff after a failure, the in-memory
 *	   limiter decides (source fallback);
 *	3. the pre-check, a bucket of twice the burst that counts this process's
 *	   requests to the database, refuses a client far over its limit without
 *	   a round trip (source local); a client within its limit never fills it;
 *	4. rl_take runs on a pooled connection within the deadline (source
 *	   database); its answer is copied into the in-memory limiter, so an
 *	   outage continues from the database's last known fill level;
 *	5. on a timeout (the query is cancelled, the connection closed) or an
 *	   error, the in-memory limiter decides (source fallback) and the
 *	   backoff starts: the database is tried again by one request per
 *	   backoff interval.
 *
 * Memory holds at most max_keys keys.  A new key takes the place of one
 * whose buckets are full again (forgetting it loses nothing).  Without such
 * room, its call goes to the database without the pre-check, and only once
 * the database has decided does it take the place of the least recently
 * used live key (the database holds the real state).  The in-memory limiter
 * never forgets a live bucket: a key it has no room for is refused (source
 * fallback) until an entry is full again, never allowed for want of room.
 *
 * Every function may be called from any thread, except rl_client_free,
 * which must be the client's last use.
 */
#ifndef RATELIMIT_CLIENT_H
#define RATELIMIT_CLIENT_H

#if defined(RATELIMIT_CLIENT_IMPLEMENTATION) && !defined(_DEFAULT_SOURCE)
/* clock_gettime, poll, getentropy and stpcpy under -std=c11 */
#define _DEFAULT_SOURCE
#endif

#include <stdbool.h>
#include <stdint.h>

typedef struct RlClient RlClient;

/* The result of a call: RL_OK, or why it was refused. */
typedef enum RlStatus
{
	RL_OK = 0,
	RL_NULL_LIMITER,
	RL_EMPTY_LIMITER,
	RL_INVALID_LIMITER,			/* not valid UTF-8 */
	RL_NULL_KEY,
	RL_EMPTY_KEY,
	RL_INVALID_KEY,				/* not valid UTF-8 */
	RL_BAD_RATE,
	RL_BAD_BURST,
	RL_BAD_COST,
	RL_TOLERANCE_TOO_LARGE,
	RL_NULL_ARGUMENT,			/* a NULL client, options or output pointer */
	RL_BAD_OPTION,
	RL_NO_MEMORY,
	RL_SYSTEM_ERROR				/* no clock or random seed */
} RlStatus;

/* Who made a decision. */
typedef enum RlSource
{
	RL_SOURCE_DATABASE,			/* rl_take answered */
	RL_SOURCE_LOCAL,			/* the pre-check refused, no round trip */
	RL_SOURCE_FALLBACK			/* the in-memory limiter, during an outage */
} RlSource;

typedef struct RlDecision
{
	bool		allowed;
	int32_t		remaining;		/* requests of cost 1 left in the burst */
	double		retry_after;	/* seconds; 0 when allowed; INFINITY when
								 * never (cost > burst: rl_take's NULL) */
	double		reset_after;	/* seconds until the bucket is full again */
	RlSource	source;
} RlDecision;

/*
 * Called at most once per warning interval per limiter while decisions of
 * that limiter fall back to memory; from any thread, never under a lock of
 * the client (it may call the client).  When more than 1024 limiters warned
 * within one interval, the others are not named: they share one summary
 * line per interval, whose limiter is "" (no limiter's name).
 */
typedef void (*RlWarningFunc) (void *arg, const char *limiter,
							   const char *message);

typedef struct RlClientOptions
{
	const char *conninfo;		/* libpq connection string or URI; "" means
								 * libpq's defaults (PGHOST, ...) */
	const char *schema;			/* schema of rl_take; NULL: search_path */
	int			deadline_ms;	/* per decision, connecting included: 250 */
	int			backoff_ms;		/* after a failure, at most one database
								 * attempt per interval: 1000 */
	int			pool_size;		/* connections, at most: 4 */
	int			max_keys;		/* in-memory buckets, at most: 100000 */
	int			warning_interval_ms;	/* per limiter: 60000 */
	RlWarningFunc warning;		/* NULL: one line on stderr */
	void	   *warning_arg;
} RlClientOptions;

/* Counters since the client was created. */
typedef struct RlClientStats
{
	uint64_t	database;		/* decisions by source */
	uint64_t	local;
	uint64_t	fallback;
	uint64_t	fallback_timeout;	/* fallbacks by reason */
	uint64_t	fallback_error;
	uint64_t	no_room;		/* fallbacks refused: no bucket for the key,
								 * every one in memory live */
	uint64_t	evictions;		/* keys forgotten to stay within max_keys */
	uint64_t	keys;			/* keys in memory now */
} RlClientStats;

/* Fill options with the defaults; set conninfo and what else you need. */
extern void rl_client_options_init(RlClientOptions *options);

/* Create a client.  It connects lazily: an outage does not stop a start. */
extern RlStatus rl_client_new(const RlClientOptions *options,
							  RlClient **client);

/*
 * Take cost requests from the bucket of (limiter, key) at rate per second
 * with burst, as rl_take(limiter, key, rate, burst, cost) does.  On RL_OK,
 * *decision holds the decision; otherwise it holds a denial and the status
 * says which argument was refused.
 */
extern RlStatus rl_client_take(RlClient *client, const char *limiter,
							   const char *key, double rate, int32_t burst,
							   int32_t cost, RlDecision *decision);

extern void rl_client_stats(RlClient *client, RlClientStats *stats);

/*
 * Close the connections and free all, without waiting for the network: a
 * cancel request still in progress goes on by itself.
 */
extern void rl_client_free(RlClient *client);

/* A sentence for a status, naming the argument. */
extern const char *rl_status_message(RlStatus status);

#endif							/* RATELIMIT_CLIENT_H */


#if defined(RATELIMIT_CLIENT_IMPLEMENTATION) && !defined(RATELIMIT_CLIENT_IMPLEMENTED)
#define RATELIMIT_CLIENT_IMPLEMENTED

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <libpq-fe.h>

#include "gcra.h"

/* 2000-01-01 (PostgreSQL's epoch) in Unix microseconds */
#define RL_PG_EPOCH_US INT64_C(946684800000000)
/* the last microsecond a timestamptz can hold (294276-12-31 23:59:59.999999) */
#define RL_PG_MAX_TIME_US (INT64_C(9223371331200000000) - 1)
/* limiters whose last warning time is remembered */
#define RL_MAX_WARNED_LIMITERS 1024
/* cancel requests in progress in a process, at most */
#define RL_MAX_CANCELS 64
#define RL_DETAIL_LEN 256

/*
 * One (limiter, key) in memory.  It is known by a keyed hash only: no key
 * text is kept, every entry has the same size, and a caller who picks keys
 * cannot aim them at one hash chain.
 */
typedef struct RlEntry
{
	uint64_t	id[2];			/* keyed hash of limiter, NUL, key */
	struct RlEntry *chain;		/* next in the hash slot */
	struct RlEntry *newer;		/* least recently used order */
	struct RlEntry *older;
	int64_t		full_at_us;		/* both buckets are full again from then */
	int32_t		heap_pos;
	GcraBucket	precheck;		/* this process's round trips, 2 x burst */
	GcraBucket	memory;			/* the database's last answer, continued */
} RlEntry;

/*
 * The bounded key table: hash chains, a min-heap on full_at_us, an LRU list.
 * The limiters that warned are kept in one too (see rl_warning_due).
 */
typedef struct RlTable
{
	RlEntry   **slots;
	uint64_t	mask;
	RlEntry   **heap;
	int32_t		count;
	int32_t		max;
	RlEntry    *newest;
	RlEntry    *oldest;
	uint64_t	evictions;
} RlTable;

typedef enum RlConnState
{
	RL_CONN_EMPTY,				/* no connection */
	RL_CONN_IDLE,
	RL_CONN_BUSY				/* owned by one decision */
} RlConnState;

typedef struct RlConnection
{
	RlConnState state;
	PGconn	   *conn;
	bool		in_flight;		/* a query may still run: cancel it first */
} RlConnection;

typedef enum RlReason
{
	RL_REASON_TIMEOUT,
	RL_REASON_ERROR
} RlReason;

typedef enum RlDbResult
{
	RL_DB_OK,
	RL_DB_BUSY,					/* no free connection before the deadline */
	RL_DB_TIMEOUT,
	RL_DB_ERROR
} RlDbResult;

typedef enum RlWarning
{
	RL_WARN_NONE,
	RL_WARN_LIMITER,			/* the limiter's own warning */
	RL_WARN_SUMMARY				/* the line for limiters not remembered */
} RlWarning;

struct RlClient
{
	char	   *conninfo;
	char	   *query;
	int64_t		deadline_us;
	int64_t		backoff_us;
	int64_t		warning_interval_us;
	int			deadline_ms;
	int			backoff_ms;
	int			warning_interval_ms;
	RlWarningFunc warning;
	void	   *warning_arg;
	uint64_t	seed[4];		/* two SipHash keys */

	/* lock guards the table, the health state, warnings and counters */
	pthread_mutex_t lock;
	RlTable		table;
	int64_t		retry_db_at_us; /* 0: healthy; else no query before then */
	RlReason	failure_reason;
	char		failure[RL_DETAIL_LEN];
	RlTable		warned;			/* full_at_us: quiet until then */
	int64_t		summary_due_us; /* the next summary line not before */
	RlClientStats stats;

	/* pool_lock guards the connection slots */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_changed;	/* a slot became idle or empty */
	RlConnection *pool;
	int			pool_size;
};


/* ---- clocks ---- */

static int64_t
rl_clock_us(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Buckets and deadlines run on the monotonic clock. */
static int64_t
rl_now_us(void)
{
	return rl_clock_us(CLOCK_MONOTONIC);
}


/* ---- argument checks, as rl_take makes them ---- */

/* Well-formed UTF-8, as PostgreSQL accepts it (no overlongs, surrogates). */
static bool
rl_valid_utf8(const char *text)
{
	const unsigned char *p = (const unsigned char *) text;

	while (*p != '\0')
	{
		unsigned char lo = 0x80;	/* range of the second byte */
		unsigned char hi = 0xBF;
		int			follow;
		int			i;

		if (*p < 0x80)
		{
			p++;
			continue;
		}
		if (*p >= 0xC2 && *p <= 0xDF)
			follow = 1;
		else if (*p >= 0xE0 && *p <= 0xEF)
		{
			follow = 2;
			lo = *p == 0xE0 ? 0xA0 : 0x80;
			hi = *p == 0xED ? 0x9F : 0xBF;
		}
		else if (*p >= 0xF0 && *p <= 0xF4)
		{
			follow = 3;
			lo = *p == 0xF0 ? 0x90 : 0x80;
			hi = *p == 0xF4 ? 0x8F : 0xBF;
		}
		else
			return false;
		p++;
		if (*p < lo || *p > hi)
			return false;
		for (i = 1; i < follow; i++)
			if (p[i] < 0x80 || p[i] > 0xBF)
				return false;
		p += follow;
	}
	return true;
}

static RlStatus
rl_check_arguments(const char *limiter, const char *key, double rate,
				   int32_t burst, int32_t cost, GcraLimit *limit)
{
	/* in rl_take's order; the server refuses bad encoding before the call */
	if (limiter != NULL && !rl_valid_utf8(limiter))
		return RL_INVALID_LIMITER;
	if (key != NULL && !rl_valid_utf8(key))
		return RL_INVALID_KEY;
	if (limiter == NULL)
		return RL_NULL_LIMITER;
	if (limiter[0] == '\0')
		return RL_EMPTY_LIMITER;
	if (key == NULL)
		return RL_NULL_KEY;
	if (key[0] == '\0')
		return RL_EMPTY_KEY;
	switch (gcra_limit_init(limit, rate, burst,
							rl_clock_us(CLOCK_REALTIME) - RL_PG_EPOCH_US,
							RL_PG_MAX_TIME_US))
	{
		case GCRA_OK:
			break;
		case GCRA_BAD_RATE:
			return RL_BAD_RATE;
		case GCRA_BAD_BURST:
			return RL_BAD_BURST;
		case GCRA_BAD_COST:
			return RL_BAD_COST;
		case GCRA_TOLERANCE_TOO_LARGE:
			return RL_TOLERANCE_TOO_LARGE;
	}
	if (cost < 0)
		return RL_BAD_COST;
	return RL_OK;
}

const char *
rl_status_message(RlStatus status)
{
	switch (status)
	{
		case RL_OK:
			return gcra_error_message(GCRA_OK);
		case RL_NULL_LIMITER:
			return "limiter must not be null";
		case RL_EMPTY_LIMITER:
			return "limiter must not be empty";
		case RL_INVALID_LIMITER:
			return "limiter must be valid UTF-8";
		case RL_NULL_KEY:
			return "key must not be null";
		case RL_EMPTY_KEY:
			return "key must not be empty";
		case RL_INVALID_KEY:
			return "key must be valid UTF-8";
		case RL_BAD_RATE:
			return gcra_error_message(GCRA_BAD_RATE);
		case RL_BAD_BURST:
			return gcra_error_message(GCRA_BAD_BURST);
		case RL_BAD_COST:
			return gcra_error_message(GCRA_BAD_COST);
		case RL_TOLERANCE_TOO_LARGE:
			return gcra_error_message(GCRA_TOLERANCE_TOO_LARGE);
		case RL_NULL_ARGUMENT:
			return "client, options and decision must not be null";
		case RL_BAD_OPTION:
			return "deadline_ms, backoff_ms, pool_size, max_keys and warning_interval_ms must be at least 1 (max_keys at most 1073741824), and schema must not be empty";
		case RL_NO_MEMORY:
			return "out of memory";
		case RL_SYSTEM_ERROR:
			return "the system gave no monotonic clock or random seed, or libpq is not thread-safe";
	}
	return "unknown status";
}


/* ---- SipHash-2-4: the keyed hash that names entries ---- */

#define RL_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static void
rl_sip_rounds(uint64_t *v, int rounds)
{
	while (rounds-- > 0)
	{
		v[0] += v[1];
		v[1] = RL_ROTL(v[1], 13);
		v[1] ^= v[0];
		v[0] = RL_ROTL(v[0], 32);
		v[2] += v[3];
		v[3] = RL_ROTL(v[3], 16);
		v[3] ^= v[2];
		v[0] += v[3];
		v[3] = RL_ROTL(v[3], 21);
		v[3] ^= v[0];
		v[2] += v[1];
		v[1] = RL_ROTL(v[1], 17);
		v[1] ^= v[2];
		v[2] = RL_ROTL(v[2], 32);
	}
}

/* SipHash-2-4 under key of the byte strings parts[0..nparts), concatenated. */
static uint64_t
rl_siphash(const uint64_t key[2], const void *const *parts,
		   const size_t *lengths, int nparts)
{
	uint64_t	v[4] = {
		key[0] ^ UINT64_C(0x736f6d6570736575),
		key[1] ^ UINT64_C(0x646f72616e646f6d),
		key[0] ^ UINT64_C(0x6c7967656e657261),
		key[1] ^ UINT64_C(0x7465646279746573)
	};
	uint64_t	word = 0;
	uint64_t	length = 0;
	int			i;

	for (i = 0; i < nparts; i++)
	{
		const unsigned char *p = parts[i];
		size_t		n;

		for (n = 0; n < lengths[i]; n++)
		{
			word |= (uint64_t) p[n] << (8 * (length % 8));
			if (++length % 8 == 0)
			{
				v[3] ^= word;
				rl_sip_rounds(v, 2);
				v[0] ^= word;
				word = 0;
			}
		}
	}
	word |= length << 56;
	v[3] ^= word;
	rl_sip_rounds(v, 2);
	v[0] ^= word;
	v[2] ^= 0xff;
	rl_sip_rounds(v, 4);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/*
 * The 128-bit name of (limiter, key), from two independent keys.  Keys are
 * never empty, so (limiter, "") names the limiter alone.
 */
static void
rl_identity(const RlClient *c, const char *limiter, const char *key,
			uint64_t id[2])
{
	const void *parts[3] = {limiter, "", key};
	size_t		lengths[3] = {strlen(limiter), 1, strlen(key)};

	id[0] = rl_siphash(&c->seed[0], parts, lengths, 3);
	id[1] = rl_siphash(&c->seed[2], parts, lengths, 3);
}


/* ---- the bounded key table ---- */

static void
rl_heap_put(RlTable *t, int32_t pos, RlEntry *e)
{
	t->heap[pos] = e;
	e->heap_pos = pos;
}

/* Move e to its place in the heap after its full_at_us changed. */
static void
rl_heap_fix(RlTable *t, RlEntry *e)
{
	int32_t		pos = e->heap_pos;

	while (pos > 0 && t->heap[(pos - 1) / 2]->full_at_us > e->full_at_us)
	{
		rl_heap_put(t, pos, t->heap[(pos - 1) / 2]);
		pos = (pos - 1) / 2;
	}
	for (;;)
	{
		int32_t		child = 2 * pos + 1;

		if (child >= t->count)
			break;
		if (child + 1 < t->count &&
			t->heap[child + 1]->full_at_us < t->heap[child]->full_at_us)
			child++;
		if (t->heap[child]->full_at_us >= e->full_at_us)
			break;
		rl_heap_put(t, pos, t->heap[child]);
		pos = child;
	}
	rl_heap_put(t, pos, e);
}

static void
rl_lru_unlink(RlTable *t, RlEntry *e)
{
	if (e->newer != NULL)
		e->newer->older = e->older;
	else
		t->newest = e->older;
	if (e->older != NULL)
		e->older->newer = e->newer;
	else
		t->oldest = e->newer;
}

static void
rl_lru_push(RlTable *t, RlEntry *e)
{
	e->newer = NULL;
	e->older = t->newest;
	if (t->newest != NULL)
		t->newest->newer = e;
	else
		t->oldest = e;
	t->newest = e;
}

/*
 * Make room for one entry: forget one that is full again (it is the same as
 * an absent one, nothing is lost), or else, when evict_live, the least
 * recently used.  False when there is no room to make.
 */
static bool
rl_table_make_room(RlTable *t, int64_t now, bool evict_live)
{
	RlEntry    *victim;
	RlEntry   **link;
	RlEntry    *last;

	if (t->count < t->max)
		return true;
	if (t->heap[0]->full_at_us <= now)
		victim = t->heap[0];
	else if (evict_live)
		victim = t->oldest;
	else
		return false;
	link = &t->slots[victim->id[0] & t->mask];
	while (*link != victim)
		link = &(*link)->chain;
	*link = victim->chain;
	rl_lru_unlink(t, victim);
	last = t->heap[--t->count];
	if (last != victim)
	{
		rl_heap_put(t, victim->heap_pos, last);
		rl_heap_fix(t, last);
	}
	t->evictions++;
	free(victim);
	return true;
}

/*
 * Find or create the entry named id, most recently used now.  NULL when it
 * is absent and there is no room for it (t->count == t->max), or no memory.
 */
static RlEntry *
rl_table_get(RlTable *t, const uint64_t id[2], int64_t now, bool evict_live)
{
	RlEntry   **slot = &t->slots[id[0] & t->mask];
	RlEntry    *e;

	for (e = *slot; e != NULL; e = e->chain)
	{
		if (e->id[0] == id[0] && e->id[1] == id[1])
		{
			rl_lru_unlink(t, e);
			rl_lru_push(t, e);
			return e;
		}
	}
	if (!rl_table_make_room(t, now, evict_live))
		return NULL;
	e = calloc(1, sizeof(RlEntry));
	if (e == NULL)
		return NULL;
	e->id[0] = id[0];
	e->id[1] = id[1];
	e->full_at_us = INT64_MIN;
	e->chain = *slot;
	*slot = e;
	rl_lru_push(t, e);
	rl_heap_put(t, t->count++, e);
	rl_heap_fix(t, e);
	return e;
}

static int64_t
rl_bucket_full_at(const GcraBucket *b)
{
	return b->present ? b->tat_us : INT64_MIN;
}

/* Set one of e's buckets and keep the heap in order. */
static void
rl_entry_set(RlTable *t, RlEntry *e, GcraBucket *bucket, int64_t tat_us,
			 int64_t interval_us)
{
	bucket->present = true;
	bucket->tat_us = tat_us;
	bucket->interval_us = interval_us;
	e->full_at_us = rl_bucket_full_at(&e->precheck);
	if (rl_bucket_full_at(&e->memory) > e->full_at_us)
		e->full_at_us = rl_bucket_full_at(&e->memory);
	rl_heap_fix(t, e);
}

/* Decide cost against one bucket of e, storing what the decision says. */
static GcraDecision
rl_entry_decide(RlTable *t, RlEntry *e, GcraBucket *bucket,
				const GcraLimit *limit, int64_t now, int32_t cost)
{
	GcraDecision d = gcra_decide(limit, bucket, now, cost);

	if (d.store)
		rl_entry_set(t, e, bucket, d.new_tat_us, limit->interval_us);
	return d;
}

static void
rl_decision_from_gcra(RlDecision *out, const GcraDecision *d, RlSource source)
{
	out->allowed = d->allowed;
	out->remaining = d->remaining;
	out->retry_after = d->retry_known ? d->retry_after_us / 1e6 : INFINITY;
	out->reset_after = d->reset_after_us / 1e6;
	out->source = source;
}


/* ---- connections ---- */

/* Wait until sock is ready for events; false when the deadline passed. */
static bool
rl_wait(int sock, short events, int64_t deadline)
{
	for (;;)
	{
		int64_t		left = deadline - rl_now_us();
		struct pollfd pfd;

		if (left <= 0)
			return false;
		pfd.fd = sock;
		pfd.events = events;
		pfd.revents = 0;
		left = (left + 999) / 1000;	/* in ms, rounded up */
		/* ready, or an error that libpq will report */
		if (poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int) left) != 0)
			return true;
	}
}

/* The first line of libpq's message, or of the server's error. */
static void
rl_error_detail(PGconn *conn, const PGresult *res, char *detail, size_t len)
{
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if (primary != NULL)
		snprintf(detail, len, "%s (SQLSTATE %s)", primary,
				 sqlstate ? sqlstate : "unknown");
	else
		snprintf(detail, len, "%s", conn ? PQerrorMessage(conn) : "out of memory");
	detail[strcspn(detail, "\n")] = '\0';
	if (detail[0] == '\0')
		snprintf(detail, len, "the connection failed");
}

static RlConnection *
rl_pool_acquire(RlClient *c, int64_t deadline)
{
	struct timespec until = {deadline / 1000000, (deadline % 1000000) * 1000};
	RlConnection *slot = NULL;

	pthread_mutex_lock(&c->pool_lock);
	for (;;)
	{
		RlConnection *empty = NULL;
		int			i;

		for (i = 0; i < c->pool_size && slot == NULL; i++)
		{
			if (c->pool[i].state == RL_CONN_IDLE)
				slot = &c->pool[i];
			else if (c->pool[i].state == RL_CONN_EMPTY && empty == NULL)
				empty = &c->pool[i];
		}
		if (slot == NULL)
			slot = empty;
		if (slot != NULL)
		{
			slot->state = RL_CONN_BUSY;
			break;
		}
		if (pthread_cond_timedwait(&c->pool_changed, &c->pool_lock, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&c->pool_lock);
	return slot;
}

/*
 * Cancel requests in progress in this process.  A cancel opens a new
 * connection to the server, and PQcancel then waits, with no deadline, for
 * the server to close it: where the request is lost (a network that holds
 * packets, a proxy that never answers), that is forever.  libpq 15 has no
 * cancel with a timeout, and the cancel key inside PGcancel is opaque, so
 * the request cannot be sent on a socket of our own.  Nor may the
 * connection be closed first: PgBouncer forgets a client's cancel key when
 * the client goes.  So the connection goes to a detached thread of its own,
 * which cancels and then closes it, and its pool slot is free at once: no
 * slot, decision or rl_client_free waits for a cancel, and a lost one costs
 * a blocked thread and a socket, not the pool.  The count is per process,
 * as such a thread may outlive its client.
 */
static atomic_int rl_cancels_running;

static void *
rl_cancel_main(void *arg)
{
	PGconn	   *conn = arg;
	PGcancel   *cancel = PQgetCancel(conn);
	char		errbuf[256];

	/* a failed cancel is fine: closing ends the session anyway */
	if (cancel != NULL)
		(void) PQcancel(cancel, errbuf, sizeof(errbuf));
	PQfreeCancel(cancel);
	PQfinish(conn);
	atomic_fetch_sub(&rl_cancels_running, 1);
	return NULL;
}

/*
 * Close a connection, at once or, while a query may still run on it, after
 * cancelling it on a thread of its own.  Past RL_MAX_CANCELS in progress
 * (they are being lost), or without a thread, the query is not cancelled:
 * the server finishes it, then finds the connection closed.  PQfinish does
 * not wait: the connection is non-blocking.
 */
static void
rl_close(RlConnection *slot)
{
	pthread_attr_t attr;
	pthread_t	thread;
	bool		started = false;

	if (slot->in_flight &&
		atomic_fetch_add(&rl_cancels_running, 1) < RL_MAX_CANCELS &&
		pthread_attr_init(&attr) == 0)
	{
		/* PQcancel needs little stack, and a blocked thread keeps its own */
		started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
			pthread_attr_setstacksize(&attr, 256 * 1024) == 0 &&
			pthread_create(&thread, &attr, rl_cancel_main, slot->conn) == 0;
		pthread_attr_destroy(&attr);
	}
	if (!started)
	{
		if (slot->in_flight)
			atomic_fetch_sub(&rl_cancels_running, 1);
		PQfinish(slot->conn);
	}
	slot->conn = NULL;
	slot->in_flight = false;
}

/*
 * Give a slot back: idle for the next decision, or closed and empty.  A
 * broken connection takes the idle ones with it: they lead to the same
 * server, and a stale one would fail a later probe after the server is back
 * (closing never waits, so it is done under the lock).
 */
static void
rl_pool_release(RlClient *c, RlConnection *slot, bool keep, bool broken)
{
	int			i;

	if (!keep)
		rl_close(slot);
	pthread_mutex_lock(&c->pool_lock);
	slot->state = keep ? RL_CONN_IDLE : RL_CONN_EMPTY;
	for (i = 0; broken && i < c->pool_size; i++)
	{
		if (c->pool[i].state == RL_CONN_IDLE)
		{
			rl_close(&c->pool[i]);
			c->pool[i].state = RL_CONN_EMPTY;
		}
	}
	pthread_cond_broadcast(&c->pool_changed);
	pthread_mutex_unlock(&c->pool_lock);
}

static RlDbResult
rl_connect(RlClient *c, RlConnection *slot, int64_t deadline, char *detail,
		   size_t len)
{
	static const char *const keywords[] = {
		"dbname", "fallback_application_name", "client_encoding", NULL
	};
	const char *const values[] = {c->conninfo, "ratelimit_client", "UTF8", NULL};
	PostgresPollingStatusType state = PGRES_POLLING_WRITING;

	/* client_encoding after the conninfo: limiter and key are UTF-8 */
	slot->conn = PQconnectStartParams(keywords, values, 1);
	while (slot->conn != NULL && PQstatus(slot->conn) != CONNECTION_BAD &&
		   state != PGRES_POLLING_OK && state != PGRES_POLLING_FAILED)
	{
		if (!rl_wait(PQsocket(slot->conn),
					 state == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline))
		{
			snprintf(detail, len, "could not connect within %d ms", c->deadline_ms);
			return RL_DB_TIMEOUT;
		}
		state = PQconnectPoll(slot->conn);
	}
	if (state != PGRES_POLLING_OK || PQsetnonblocking(slot->conn, 1) != 0)
	{
		rl_error_detail(slot->conn, NULL, detail, len);
		return RL_DB_ERROR;
	}
	return RL_DB_OK;
}

/* Run the query within the deadline; *result is its one result on RL_DB_OK. */
static RlDbResult
rl_query(RlClient *c, RlConnection *slot, const char *const *values,
		 int64_t deadline, PGresult **result, char *detail, size_t len)
{
	PGconn	   *conn = slot->conn;
	PGresult   *res;
	int			flushed;

	/* an unnamed statement: nothing outlives the transaction (PgBouncer) */
	if (!PQsendQueryParams(conn, c->query, 5, NULL, values, NULL, NULL, 0))
		goto failed;
	slot->in_flight = true;
	while ((flushed = PQflush(conn)) == 1)
	{
		if (!rl_wait(PQsocket(conn), POLLIN | POLLOUT, deadline))
			goto timeout;
		if (!PQconsumeInput(conn))
			goto failed;
	}
	if (flushed < 0)
		goto failed;
	for (;;)
	{
		/* PQgetResult would block while busy: wait here, within the deadline */
		while (PQisBusy(conn))
		{
			if (!rl_wait(PQsocket(conn), POLLIN, deadline))
				goto timeout;
			if (!PQconsumeInput(conn))
				goto failed;
		}
		res = PQgetResult(conn);
		if (res == NULL)
			break;
		if (*result == NULL)
			*result = res;
		else
			PQclear(res);
	}
	slot->in_flight = false;
	if (*result == NULL || PQresultStatus(*result) != PGRES_TUPLES_OK)
	{
		rl_error_detail(conn, *result, detail, len);
		return RL_DB_ERROR;
	}
	return RL_DB_OK;

failed:
	rl_error_detail(conn, NULL, detail, len);
	return RL_DB_ERROR;

timeout:
	snprintf(detail, len, "no answer within %d ms", c->deadline_ms);
	return RL_DB_TIMEOUT;
}

static bool
rl_parse_double(const char *text, double *value)
{
	char	   *end;

	*value = strtod(text, &end);
	return end != text && *end == '\0' && isfinite(*value) && *value >= 0;
}

/* Seconds from the database in microseconds, at most max_us. */
static int64_t
rl_seconds_to_us(double seconds, int64_t max_us)
{
	return seconds * 1e6 >= (double) max_us ? max_us : (int64_t) llround(seconds * 1e6);
}

/* rl_take's row as a decision; false when it is not one. */
static bool
rl_parse_decision(const PGresult *res, RlDecision *out)
{
	char	   *end;
	long		remaining;

	if (PQntuples(res) != 1 || PQnfields(res) != 4 || PQgetisnull(res, 0, 0) ||
		PQgetisnull(res, 0, 1) || PQgetisnull(res, 0, 3))
		return false;
	out->allowed = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	remaining = strtol(PQgetvalue(res, 0, 1), &end, 10);
	if (*end != '\0' || remaining < 0 || remaining > INT32_MAX)
		return false;
	out->remaining = (int32_t) remaining;
	if (PQgetisnull(res, 0, 2))
		out->retry_after = INFINITY;
	else if (!rl_parse_double(PQgetvalue(res, 0, 2), &out->retry_after))
		return false;
	out->source = RL_SOURCE_DATABASE;
	return rl_parse_double(PQgetvalue(res, 0, 3), &out->reset_after);
}

/* One decision by rl_take on a pooled connection, within the deadline. */
static RlDbResult
rl_db_take(RlClient *c, const char *limiter, const char *key, double rate,
		   int32_t burst, int32_t cost, int64_t deadline, RlDecision *out,
		   char *detail, size_t len)
{
	char		rate_text[32];
	char		burst_text[16];
	char		cost_text[16];
	const char *values[5] = {limiter, key, rate_text, burst_text, cost_text};
	bool		second_try = false;

	/* %.17g: the server reads back the same double */
	snprintf(rate_text, sizeof(rate_text), "%.17g", rate);
	snprintf(burst_text, sizeof(burst_text), "%d", (int) burst);
	snprintf(cost_text, sizeof(cost_text), "%d", (int) cost);
	for (;;)
	{
		RlConnection *slot = rl_pool_acquire(c, deadline);
		PGresult   *res = NULL;
		RlDbResult	r;
		bool		reused;
		bool		dead;

		if (slot == NULL)
		{
			snprintf(detail, len, "no free connection within %d ms (pool_size %d)",
					 c->deadline_ms, c->pool_size);
			return RL_DB_BUSY;
		}
		reused = slot->conn != NULL;
		r = reused ? RL_DB_OK : rl_connect(c, slot, deadline, detail, len);
		if (r == RL_DB_OK)
			r = rl_query(c, slot, values, deadline, &res, detail, len);
		if (r == RL_DB_OK && !rl_parse_decision(res, out))
		{
			snprintf(detail, len, "rl_take answered something that is not a decision");
			r = RL_DB_ERROR;
		}
		PQclear(res);
		/* a pooled connection the server closed, e.g. by a restart */
		dead = reused && r == RL_DB_ERROR && PQstatus(slot->conn) != CONNECTION_OK;
		rl_pool_release(c, slot,
						r != RL_DB_TIMEOUT && slot->conn != NULL &&
						PQstatus(slot->conn) == CONNECTION_OK &&
						PQtransactionStatus(slot->conn) == PQTRANS_IDLE,
						dead);
		if (!dead || second_try)
			return r;
		/* the server may be back with a new session: try one once */
		second_try = true;
	}
}


/* ---- decisions ---- */

/*
 * Which warning a fallback of limiter gives now.  A limiter that warned is
 * remembered, quiet until its interval has passed, in a table of
 * RL_MAX_WARNED_LIMITERS; one whose interval has passed makes room, as a
 * full bucket does.  When the table is full of limiters that warned within
 * their interval, the others are not named: they share one summary line per
 * interval, so no limiter is named twice within one, whatever their number.
 */
static RlWarning
rl_warning_due(RlClient *c, const char *limiter, int64_t now)
{
	uint64_t	id[2];
	RlEntry    *e;

	rl_identity(c, limiter, "", id);
	e = rl_table_get(&c->warned, id, now, false);
	if (e == NULL)
	{
		if (now < c->summary_due_us)
			return RL_WARN_NONE;
		c->summary_due_us = now + c->warning_interval_us;
		return RL_WARN_SUMMARY;
	}
	if (e->full_at_us > now)
		return RL_WARN_NONE;
	e->full_at_us = now + c->warning_interval_us;
	rl_heap_fix(&c->warned, e);
	return RL_WARN_LIMITER;
}

/*
 * Decide in memory during an outage, count it, and warn when due.  Called
 * with c->lock held; releases it (the warning runs outside the lock).
 *
 * It never forgets a live bucket to make room for the key: each key so
 * forgotten would start again with a full burst, and more keys than
 * max_keys would be allowed without limit.  A key without a bucket and
 * without room is refused until the first entry is full again.
 */
static RlStatus
rl_fallback(RlClient *c, const uint64_t id[2], const GcraLimit *limit,
			int64_t now, int32_t cost, const char *limiter, RlReason reason,
			const char *detail, RlDecision *out)
{
	RlEntry    *e = rl_table_get(&c->table, id, now, false);
	char		message[1024];
	RlWarning	warn;

	if (e != NULL)
	{
		GcraDecision d = rl_entry_decide(&c->table, e, &e->memory, limit,
										 now, cost);

		rl_decision_from_gcra(out, &d, RL_SOURCE_FALLBACK);
	}
	else if (c->table.count < c->table.max)
	{
		/* room, but no memory for a bucket: never allowed for want of it */
		pthread_mutex_unlock(&c->lock);
		return RL_NO_MEMORY;
	}
	else
	{
		double		room_after = (c->table.heap[0]->full_at_us - now) / 1e6;

		out->allowed = false;
		out->remaining = 0;
		/* cost > burst is never allowed, with a bucket or without */
		out->retry_after = cost > limit->burst ? INFINITY : room_after;
		out->reset_after = room_after;
		out->source = RL_SOURCE_FALLBACK;
		c->stats.no_room++;
	}
	c->stats.fallback++;
	if (reason == RL_REASON_TIMEOUT)
		c->stats.fallback_timeout++;
	else
		c->stats.fallback_error++;
	warn = rl_warning_due(c, limiter, now);
	if (warn == RL_WARN_LIMITER)
		snprintf(message, sizeof(message),
				 "limiter \"%s\" is decided in memory at the same limit: the database failed (%s: %s); it is tried again at most every %d ms",
				 limiter, reason == RL_REASON_TIMEOUT ? "timeout" : "error",
				 detail, c->backoff_ms);
	else if (warn == RL_WARN_SUMMARY)
		snprintf(message, sizeof(message),
				 "more than %d limiters are decided in memory at the same limit: the database failed (%s: %s); it is tried again at most every %d ms; only %d are named, each at most once per %d ms, and this line comes at most once per %d ms",
				 RL_MAX_WARNED_LIMITERS,
				 reason == RL_REASON_TIMEOUT ? "timeout" : "error", detail,
				 c->backoff_ms, RL_MAX_WARNED_LIMITERS,
				 c->warning_interval_ms, c->warning_interval_ms);
	pthread_mutex_unlock(&c->lock);
	if (warn != RL_WARN_NONE)
		c->warning(c->warning_arg, warn == RL_WARN_LIMITER ? limiter : "",
				   message);
	return RL_OK;
}

/*
 * A refusal by the pre-check, with the figures the database would give as
 * far as this process knows: its last answer for the key, carried forward in
 * time (neither is stored).  The request is allowed again when both the
 * database and the pre-check would let it through.
 */
static void
rl_refuse_locally(RlEntry *e, const GcraLimit *limit,
				  const GcraDecision *precheck, int64_t now, int32_t cost,
				  RlDecision *out)
{
	GcraDecision peek = gcra_decide(limit, &e->memory, now, 0);
	GcraDecision take = gcra_decide(limit, &e->memory, now, cost);

	rl_decision_from_gcra(out, &peek, RL_SOURCE_LOCAL);
	out->allowed = false;
	out->retry_after = (take.allowed || take.retry_after_us < precheck->retry_after_us ?
						precheck->retry_after_us : take.retry_after_us) / 1e6;
}

RlStatus
rl_client_take(RlClient *client, const char *limiter, const char *key,
			   double rate, int32_t burst, int32_t cost, RlDecision *decision)
{
	RlClient   *c = client;
	GcraLimit	limit;
	GcraLimit	precheck;
	bool		use_precheck;
	uint64_t	id[2];
	int64_t		deadline;
	int64_t		now;
	RlEntry    *e;
	RlStatus	status;
	RlDbResult	r;
	RlReason	reason;
	char		detail[RL_DETAIL_LEN];

	if (decision == NULL)
		return RL_NULL_ARGUMENT;
	memset(decision, 0, sizeof(*decision));
	if (c == NULL)
		return RL_NULL_ARGUMENT;
	status = rl_check_arguments(limiter, key, rate, burst, cost, &limit);
	if (status != RL_OK)
		return status;

	/*
	 * The pre-check is a bucket of twice the burst at the same rate.  A
	 * request of cost > burst is never allowed and must not spend it: it
	 * goes to the database, which answers without writing.
	 */
	use_precheck = cost <= burst &&
		gcra_limit_init(&precheck, rate, burst > INT32_MAX / 2 ? INT32_MAX : 2 * burst,
						rl_clock_us(CLOCK_REALTIME) - RL_PG_EPOCH_US,
						RL_PG_MAX_TIME_US) == GCRA_OK;
	rl_identity(c, limiter, key, id);
	deadline = rl_now_us() + c->deadline_us;

	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (c->retry_db_at_us != 0 && now < c->retry_db_at_us)
	{
		/* in the backoff: the failure that started it is the reason */
		snprintf(detail, sizeof(detail), "%s", c->failure);
		return rl_fallback(c, id, &limit, now, cost, limiter,
						   c->failure_reason, detail, decision);
	}

	/*
	 * A key without a bucket gets one only where nothing live is lost: the
	 * database may not answer, and then the in-memory limiter decides on it.
	 * Without room, the database decides unchecked; room is made when it
	 * has answered.
	 */
	e = rl_table_get(&c->table, id, now, false);
	if (e != NULL && use_precheck)
	{
		GcraDecision p = rl_entry_decide(&c->table, e, &e->precheck,
										 &precheck, now, cost);

		if (!p.allowed)
		{
			rl_refuse_locally(e, &limit, &p, now, cost, decision);
			c->stats.local++;
			pthread_mutex_unlock(&c->lock);
			return RL_OK;
		}
	}
	/* after a failure, this request is the one probe of the interval */
	if (c->retry_db_at_us != 0)
		c->retry_db_at_us = now + c->backoff_us;
	pthread_mutex_unlock(&c->lock);

	r = rl_db_take(c, limiter, key, rate, burst, cost, deadline, decision,
				   detail, sizeof(detail));

	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (r == RL_DB_OK)
	{
		c->retry_db_at_us = 0;
		c->stats.database++;

		/*
		 * The shared fill level, for an outage that starts now.  Looked up
		 * again, as another thread may have evicted it meanwhile.  The
		 * database has decided, so the least recently used bucket may make
		 * room even if it is live: the database holds its state.
		 */
		e = rl_table_get(&c->table, id, now, true);
		if (e != NULL)
			rl_entry_set(&c->table, e, &e->memory,
						 now + rl_seconds_to_us(decision->reset_after,
												limit.tolerance_us),
						 limit.interval_us);
		pthread_mutex_unlock(&c->lock);
		return RL_OK;
	}
	reason = r == RL_DB_ERROR ? RL_REASON_ERROR : RL_REASON_TIMEOUT;
	/* a full pool is load, not a failure of the database: no backoff */
	if (r != RL_DB_BUSY)
	{
		c->retry_db_at_us = now + c->backoff_us;
		c->failure_reason = reason;
		snprintf(c->failure, sizeof(c->failure), "%s", detail);
	}
	return rl_fallback(c, id, &limit, now, cost, limiter, reason, detail,
					   decision);
}


/* ---- the client ---- */

static void
rl_warn_stderr(void *arg, const char *limiter, const char *message)
{
	(void) arg;
	(void) limiter;
	fprintf(stderr, "ratelimit: %s\n", message);
}

void
rl_client_options_init(RlClientOptions *options)
{
	memset(options, 0, sizeof(*options));
	options->conninfo = "";
	options->deadline_ms = 250;
	options->backoff_ms = 1000;
	options->pool_size = 4;
	options->max_keys = 100000;
	options->warning_interval_ms = 60000;
}

/* SELECT ... FROM "schema".rl_take(...), the schema quoted as an identifier. */
static char *
rl_build_query(const char *schema)
{
	static const char head[] = "SELECT allowed, remaining, retry_after, reset_after FROM ";
	static const char call[] = "rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)";
	char	   *query = malloc(sizeof(head) + sizeof(call) +
							   (schema ? 2 * strlen(schema) + 3 : 0));
	char	   *p;

	if (query == NULL)
		return NULL;
	p = stpcpy(query, head);
	if (schema != NULL)
	{
		*p++ = '"';
		for (; *schema != '\0'; schema++)
		{
			if (*schema == '"')
				*p++ = '"';
			*p++ = *schema;
		}
		*p++ = '"';
		*p++ = '.';
	}
	strcpy(p, call);
	return query;
}

/* Arrays for a table of at most max entries; false without memory. */
static bool
rl_table_init(RlTable *t, int32_t max)
{
	uint64_t	slots = 1;

	while (slots < (uint64_t) max)
		slots <<= 1;
	t->slots = calloc(slots, sizeof(RlEntry *));
	t->heap = calloc(max, sizeof(RlEntry *));
	t->mask = slots - 1;
	t->max = max;
	return t->slots != NULL && t->heap != NULL;
}

static void
rl_table_free(RlTable *t)
{
	while (t->oldest != NULL)
	{
		RlEntry    *e = t->oldest;

		t->oldest = e->newer;
		free(e);
	}
	free(t->slots);
	free(t->heap);
}

static void
rl_client_release(RlClient *c)
{
	rl_table_free(&c->table);
	rl_table_free(&c->warned);
	free(c->pool);
	free(c->query);
	free(c->conninfo);
	free(c);
}

RlStatus
rl_client_new(const RlClientOptions *options, RlClient **client)
{
	RlClient   *c;
	pthread_condattr_t attr;
	bool		started;

	if (options == NULL || client == NULL)
		return RL_NULL_ARGUMENT;
	*client = NULL;
	if (options->deadline_ms < 1 || options->backoff_ms < 1 ||
		options->pool_size < 1 || options->max_keys < 1 ||
		options->max_keys > (1 << 30) || options->warning_interval_ms < 1 ||
		(options->schema != NULL && options->schema[0] == '\0'))
		return RL_BAD_OPTION;
	if (!PQisthreadsafe())
		return RL_SYSTEM_ERROR;

	c = calloc(1, sizeof(RlClient));
	if (c == NULL)
		return RL_NO_MEMORY;
	c->conninfo = strdup(options->conninfo ? options->conninfo : "");
	c->query = rl_build_query(options->schema);
	c->pool = calloc(options->pool_size, sizeof(RlConnection));
	if (!rl_table_init(&c->table, options->max_keys) ||
		!rl_table_init(&c->warned, RL_MAX_WARNED_LIMITERS) ||
		c->conninfo == NULL || c->query == NULL || c->pool == NULL)
	{
		rl_client_release(c);
		return RL_NO_MEMORY;
	}
	c->deadline_ms = options->deadline_ms;
	c->backoff_ms = options->backoff_ms;
	c->warning_interval_ms = options->warning_interval_ms;
	c->deadline_us = (int64_t) options->deadline_ms * 1000;
	c->backoff_us = (int64_t) options->backoff_ms * 1000;
	c->warning_interval_us = (int64_t) options->warning_interval_ms * 1000;
	c->pool_size = options->pool_size;
	c->warning = options->warning ? options->warning : rl_warn_stderr;
	c->warning_arg = options->warning_arg;

	/* pool_changed waits for a deadline on the monotonic clock */
	started = getentropy(c->seed, sizeof(c->seed)) == 0 &&
		pthread_condattr_init(&attr) == 0;
	if (started)
	{
		started = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
			pthread_cond_init(&c->pool_changed, &attr) == 0;
		pthread_condattr_destroy(&attr);
	}
	if (started)
	{
		/* on Linux these fail only for want of memory */
		started = pthread_mutex_init(&c->lock, NULL) == 0 &&
			pthread_mutex_init(&c->pool_lock, NULL) == 0;
	}
	if (!started)
	{
		rl_client_release(c);
		return RL_SYSTEM_ERROR;
	}
	*client = c;
	return RL_OK;
}

void
rl_client_stats(RlClient *client, RlClientStats *stats)
{
	if (client == NULL || stats == NULL)
		return;
	pthread_mutex_lock(&client->lock);
	*stats = client->stats;
	stats->evictions = client->table.evictions;
	stats->keys = (uint64_t) client->table.count;
	pthread_mutex_unlock(&client->lock);
}

void
rl_client_free(RlClient *client)
{
	int			i;

	if (client == NULL)
		return;
	/* the last use: every slot is idle or empty, and closing never waits */
	for (i = 0; i < client->pool_size; i++)
		rl_close(&client->pool[i]);
	pthread_cond_destroy(&client->pool_changed);
	pthread_mutex_destroy(&client->pool_lock);
	pthread_mutex_destroy(&client->lock);
	rl_client_release(client);
}

#endif							/* RATELIMIT_CLIENT_IMPLEMENTATION */
