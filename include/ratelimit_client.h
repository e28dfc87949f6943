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
 *	   backoff interval.  An error that a retry cannot fix is bad use, not
 *	   an outage: SQLSTATE 42501 (a limiter with a policy called with an
 *	   explicit rate and burst, or a function the role may not call), 42704
 *	   (a limiter without a policy) and class 22 (an argument refused) are
 *	   an error status for the limiter at fault, the server's SQLSTATE and
 *	   message in the answer's error, with no fallback decision and no
 *	   backoff.  With partitions set (a ratelimit_proxy in front
 *	   of shards), each partition has its own backoff, so only the keys of
 *	   a failing shard fall back; a multi-limit call falls back when any of
 *	   its keys' partitions is in its backoff.
 *
 * rl_client_take_policy and the multi-limit calls decide the same way, by
 * rl_take(limiter, key, cost) and rl_take_all_detail (a ratelimit 1.2
 * server); their pre-check and fallback decide all or nothing through
 * gcra_decide_all, by the rates and bursts of a copy of rl_policies that a
 * call reads again once it is older than policy_refresh_ms, and that an
 * outage keeps.  A limiter whose policy was never read is refused in memory,
 * never allowed.
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
 *
 * A C++ file may include it for the declarations; the implementation is C,
 * so the file that defines RATELIMIT_CLIENT_IMPLEMENTATION is a C file.
 */
#ifndef RATELIMIT_CLIENT_H
#define RATELIMIT_CLIENT_H

#if defined(RATELIMIT_CLIENT_IMPLEMENTATION) && !defined(_DEFAULT_SOURCE)
/* clock_gettime, poll and getentropy under -std=c11 */
#define _DEFAULT_SOURCE
#endif

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

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
	RL_SYSTEM_ERROR,			/* no clock or random seed */
	RL_UNKNOWN_LIMITER,			/* the database has no policy for it */
	RL_BAD_COUNT,				/* not 1 to RL_MAX_REQUESTS requests */
	RL_DUPLICATE,				/* the same (limiter, key) twice */
	RL_NOT_PERMITTED,			/* 42501: the limiter has a policy (use the
								 * policy form), or the role may not call */
	RL_REFUSED					/* class 22: the database refused an
								 * argument, e.g. a policy's limit */
} RlStatus;

/* Most requests one rl_client_take_all decides, as rl_take_all. */
#define RL_MAX_REQUESTS 16

/* Bytes of an RlError text, its NUL included */
#define RL_ERROR_TEXT 256

/*
 * Why a call was refused: empty on RL_OK.  A refusal by the database
 * (RL_NOT_PERMITTED, RL_UNKNOWN_LIMITER, RL_REFUSED) holds the server's
 * SQLSTATE, message, detail and hint; bad use that the client refuses
 * itself, the SQLSTATE the server gives the same call ("" where it has
 * none, e.g. RL_NULL_ARGUMENT) and rl_status_message's sentence.  Text
 * longer than RL_ERROR_TEXT - 1 bytes is cut at a character boundary.
 */
typedef struct RlError
{
	char		sqlstate[6];
	bool		from_server;	/* the database refused the call */
	char		message[RL_ERROR_TEXT];
	char		detail[RL_ERROR_TEXT];	/* "" when the server gave none */
	char		hint[RL_ERROR_TEXT];
} RlError;

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
	RlError		error;			/* when the call was refused */
} RlDecision;

/* One request of a multi-limit call. */
typedef struct RlRequest
{
	const char *limiter;
	const char *key;
	double		rate;			/* the explicit form only */
	int32_t		burst;			/* the explicit form only */
	int32_t		cost;			/* 0 peeks */
} RlRequest;

/* The one answer of a multi-limit call, as rl_decision_all. */
typedef struct RlDecisionAll
{
	bool		allowed;		/* every enforced request allowed, all spent */
	int32_t		remaining;		/* the least */
	double		retry_after;	/* 0 when allowed; else the largest among the
								 * denied, INFINITY when one has cost > burst */
	double		reset_after;	/* the largest */
	int			binding;		/* requests[binding].limiter is rl_take_all's
								 * limiter; on a refused argument, an
								 * unknown limiter or another refusal by
								 * the database, the request at fault */
	RlSource	source;
	RlError		error;			/* when the call was refused */
} RlDecisionAll;

/* The answer of rl_client_refund. */
typedef struct RlRefund
{
	bool		refunded;		/* a live bucket changed, as rl_refund says */
	RlSource	source;			/* RL_SOURCE_DATABASE, or RL_SOURCE_FALLBACK:
								 * during an outage, memory only */
	RlError		error;			/* when the call was refused */
} RlRefund;

/* A limiter's row of rl_policies, as the client read it last. */
typedef struct RlPolicy
{
	double		rate;
	int32_t		burst;
	bool		shadow;
	double		lockout;		/* seconds; 0: none (or a 1.2 database) */
	double		lockout_growth;
	double		lockout_max;	/* seconds; 0: as lockout */
} RlPolicy;

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
	int			policy_refresh_ms;	/* rl_policies is read again after: 10000 */
	int			partitions;		/* a ratelimit_proxy's partition count, for
								 * a backoff per partition; 0: one server,
								 * one backoff: 0 */
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
	uint64_t	no_policy;		/* fallbacks refused: the limiter's policy
								 * was never read */
	uint64_t	policy_reads;	/* times rl_policies was read */
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
 * says which argument was refused.  A limiter that has a policy is
 * RL_NOT_PERMITTED: rl_client_take_policy decides it.
 */
extern RlStatus rl_client_take(RlClient *client, const char *limiter,
							   const char *key, double rate, int32_t burst,
							   int32_t cost, RlDecision *decision);

/*
 * Take cost requests from the bucket of (limiter, key) by the limiter's
 * policy in rl_policies, as rl_take(limiter, key, cost) does.  A limiter the
 * database has no policy for is RL_UNKNOWN_LIMITER.
 */
extern RlStatus rl_client_take_policy(RlClient *client, const char *limiter,
									  const char *key, int32_t cost,
									  RlDecision *decision);

/*
 * Decide n requests, each against its own bucket, all or nothing, as
 * rl_take_all(limiters, keys, rates, bursts, costs) does.
 */
extern RlStatus rl_client_take_all(RlClient *client, const RlRequest *requests,
								   int n, RlDecisionAll *decision);

/* The same by the limiters' policies (rate and burst are not read). */
extern RlStatus rl_client_take_all_policy(RlClient *client,
										  const RlRequest *requests, int n,
										  RlDecisionAll *decision);

/*
 * Give cost requests back to the bucket of (limiter, key), as
 * rl_refund(limiter, key, cost) does (the role needs EXECUTE on it), and to
 * the client's own buckets of the key, so that a refunded request does not
 * count against the pre-check.  During an outage only the client's buckets
 * are (source fallback), and nothing is written back later.
 */
extern RlStatus rl_client_refund(RlClient *client, const char *limiter,
								 const char *key, int32_t cost,
								 RlRefund *refund);

/*
 * The limiter's policy as the client read rl_policies last (a policy call
 * reads it): RL_OK, or RL_UNKNOWN_LIMITER when that read had no row for it,
 * or no policy call has read it yet.  No round trip.
 */
extern RlStatus rl_client_policy(RlClient *client, const char *limiter,
								 RlPolicy *policy);

extern void rl_client_stats(RlClient *client, RlClientStats *stats);

/*
 * Close the connections and free all, without waiting for the network: a
 * cancel request still in progress goes on by itself.
 */
extern void rl_client_free(RlClient *client);

/* A sentence for a status, naming the argument. */
extern const char *rl_status_message(RlStatus status);

#ifdef __cplusplus
}
#endif

#endif							/* RATELIMIT_CLIENT_H */


#if defined(RATELIMIT_CLIENT_IMPLEMENTATION) && !defined(RATELIMIT_CLIENT_IMPLEMENTED)
#define RATELIMIT_CLIENT_IMPLEMENTED

#ifdef __cplusplus
#error "the implementation of ratelimit_client.h is C: define RATELIMIT_CLIENT_IMPLEMENTATION in a C file"
#endif

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
	bool		pinned;			/* in use by a multi-limit call: kept */
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
	RL_DB_ERROR,
	RL_DB_REFUSED				/* an error a retry cannot fix: bad use */
} RlDbResult;

typedef enum RlWarning
{
	RL_WARN_NONE,
	RL_WARN_LIMITER,			/* the limiter's own warning */
	RL_WARN_SUMMARY				/* the line for limiters not remembered */
} RlWarning;

/* One row of rl_policies as last read. */
typedef struct RlPolicyRow
{
	char	   *limiter;
	double		rate;
	int32_t		burst;
	bool		shadow;
	int64_t		lockout_us;		/* 0: none (or a 1.2 database) */
	double		lockout_growth;
	int64_t		lockout_max_us; /* 0: as lockout_us */
} RlPolicyRow;

/* Whether the database, or one partition of a proxy, answers. */
typedef struct RlHealth
{
	int64_t		retry_db_at_us; /* 0: healthy; else no query before then */
	RlReason	failure_reason;
	char		failure[RL_DETAIL_LEN];
} RlHealth;

struct RlClient
{
	char	   *conninfo;
	char	   *query;			/* rl_take, explicit */
	char	   *query_policy;	/* rl_take by policy */
	char	   *query_all;		/* rl_take_all_detail, explicit */
	char	   *query_all_policy;	/* rl_take_all_detail by policies */
	char	   *query_refund;	/* rl_refund */
	char	   *query_policies; /* reads rl_policies */
	char	   *query_policies_12;	/* the same at 1.2: no lockout columns */
	atomic_bool policies_12;	/* the database answered 42703: at 1.2 */
	int64_t		policy_refresh_us;
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
	RlHealth   *health;			/* one per partition */
	int			partitions;		/* at least 1 */
	RlTable		warned;			/* full_at_us: quiet until then */
	int64_t		summary_due_us; /* the next summary line not before */
	RlClientStats stats;
	RlPolicyRow *policies;		/* the last read, sorted by limiter */
	int			npolicies;
	int64_t		policies_due_us;	/* read again from then; 0: at once */

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

/* limiter and key, in rl_take's order */
static RlStatus
rl_check_names(const char *limiter, const char *key)
{
	/* the server refuses bad encoding before the call */
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
	return RL_OK;
}

static RlStatus
rl_check_arguments(const char *limiter, const char *key, double rate,
				   int32_t burst, int32_t cost, GcraLimit *limit)
{
	RlStatus	status = rl_check_names(limiter, key);

	if (status != RL_OK)
		return status;
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
		case GCRA_BAD_LOCKOUT:
			/* a lockout is a policy's, refused as the database refuses one */
			return RL_REFUSED;
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
			return "deadline_ms, backoff_ms, pool_size, max_keys, warning_interval_ms and policy_refresh_ms must be at least 1 (max_keys at most 1073741824), partitions from 0 to 65536, and schema must not be empty";
		case RL_NO_MEMORY:
			return "out of memory";
		case RL_SYSTEM_ERROR:
			return "the system gave no monotonic clock or random seed, or libpq is not thread-safe";
		case RL_UNKNOWN_LIMITER:
			return "limiter has no policy in rl_policies";
		case RL_BAD_COUNT:
			return "requests must have 1 to 16 elements";
		case RL_DUPLICATE:
			return "limiters and keys must not name the same pair twice";
		case RL_NOT_PERMITTED:
			return "the database refused the call: the limiter has a policy in rl_policies (call the policy form), or the role may not call this function";
		case RL_REFUSED:
			return "the database refused an argument of the call (SQLSTATE class 22), e.g. a policy whose limit it cannot use";
	}
	return "unknown status";
}

/* The SQLSTATE the server gives the bad use of a status; "" for none. */
static const char *
rl_status_sqlstate(RlStatus status)
{
	switch (status)
	{
		case RL_NULL_LIMITER:
		case RL_NULL_KEY:
			return "22004";
		case RL_INVALID_LIMITER:
		case RL_INVALID_KEY:
			return "22021";
		case RL_EMPTY_LIMITER:
		case RL_EMPTY_KEY:
		case RL_BAD_RATE:
		case RL_BAD_BURST:
		case RL_BAD_COST:
		case RL_TOLERANCE_TOO_LARGE:
		case RL_BAD_COUNT:
		case RL_DUPLICATE:
		case RL_REFUSED:
			return "22023";
		case RL_UNKNOWN_LIMITER:
			return "42704";
		case RL_NOT_PERMITTED:
			return "42501";
		case RL_OK:
		case RL_NULL_ARGUMENT:
		case RL_BAD_OPTION:
		case RL_NO_MEMORY:
		case RL_SYSTEM_ERROR:
			break;
	}
	return "";
}

static void
rl_error_clear(RlError *error)
{
	error->sqlstate[0] = '\0';
	error->from_server = false;
	error->message[0] = '\0';
	error->detail[0] = '\0';
	error->hint[0] = '\0';
}

/* Text into an RlError field, cut at a character boundary when too long. */
static void
rl_error_text(char *field, const char *text)
{
	size_t		n = text != NULL ? strlen(text) : 0;

	if (n >= RL_ERROR_TEXT)
	{
		n = RL_ERROR_TEXT - 1;
		/* text[n] continues a character: cut before that character */
		while (n > 0 && ((unsigned char) text[n] & 0xC0) == 0x80)
			n--;
	}
	if (n > 0)
		memcpy(field, text, n);
	field[n] = '\0';
}

/*
 * The error of a refused call, unless the server's refusal is already
 * there: the status's SQLSTATE and sentence.
 */
static RlStatus
rl_refused(RlError *error, RlStatus status)
{
	if (status != RL_OK && !error->from_server)
	{
		snprintf(error->sqlstate, sizeof(error->sqlstate), "%s",
				 rl_status_sqlstate(status));
		rl_error_text(error->message, rl_status_message(status));
	}
	return status;
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


/* ---- partitions of a proxy ---- */

/*
 * The partition of (limiter, key) is ratelimit_proxy's rl_shard_hash: the
 * first 4 bytes of SHA-256(limiter || 0x00 || key), big-endian, top bit
 * cleared, modulo the partition count.
 */
typedef struct RlSha256
{
	uint32_t	h[8];
	uint8_t		block[64];
	size_t		used;
	uint64_t	bytes;
} RlSha256;

static const uint32_t rl_sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
};

#define RL_ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void
rl_sha256_block(RlSha256 *s)
{
	uint32_t	w[64];
	uint32_t	v[8];
	int			i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t) s->block[4 * i] << 24 | (uint32_t) s->block[4 * i + 1] << 16 |
			(uint32_t) s->block[4 * i + 2] << 8 | s->block[4 * i + 3];
	for (; i < 64; i++)
		w[i] = w[i - 16] + (RL_ROTR(w[i - 15], 7) ^ RL_ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3)) +
			w[i - 7] + (RL_ROTR(w[i - 2], 17) ^ RL_ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10));
	memcpy(v, s->h, sizeof(v));
	for (i = 0; i < 64; i++)
	{
		uint32_t	t1 = v[7] + (RL_ROTR(v[4], 6) ^ RL_ROTR(v[4], 11) ^ RL_ROTR(v[4], 25)) +
			((v[4] & v[5]) ^ (~v[4] & v[6])) + rl_sha256_k[i] + w[i];
		uint32_t	t2 = (RL_ROTR(v[0], 2) ^ RL_ROTR(v[0], 13) ^ RL_ROTR(v[0], 22)) +
			((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));

		memmove(&v[1], &v[0], 7 * sizeof(uint32_t));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (i = 0; i < 8; i++)
		s->h[i] += v[i];
}

static void
rl_sha256_update(RlSha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	while (len > 0)
	{
		size_t		n = 64 - s->used < len ? 64 - s->used : len;

		memcpy(s->block + s->used, p, n);
		s->used += n;
		p += n;
		len -= n;
		if (s->used == 64)
		{
			rl_sha256_block(s);
			s->used = 0;
		}
	}
}

static int
rl_partition(const RlClient *c, const char *limiter, const char *key)
{
	RlSha256	s = {.h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}};
	uint64_t	bits;
	int			i;

	if (c->partitions == 1)
		return 0;
	rl_sha256_update(&s, limiter, strlen(limiter) + 1);
	rl_sha256_update(&s, key, strlen(key));
	bits = s.bytes * 8;
	rl_sha256_update(&s, "\x80", 1);
	while (s.used != 56)
		rl_sha256_update(&s, "", 1);
	for (i = 7; i >= 0; i--)
	{
		uint8_t		b = (uint8_t) (bits >> (8 * i));

		rl_sha256_update(&s, &b, 1);
	}
	return (int) ((s.h[0] & 0x7fffffff) % (uint32_t) c->partitions);
}

/* The first partition of parts in its backoff, or NULL; c->lock held. */
static RlHealth *
rl_backing_off(RlClient *c, const int *parts, int n, int64_t now)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		RlHealth   *h = &c->health[parts[i]];

		if (h->retry_db_at_us != 0 && now < h->retry_db_at_us)
			return h;
	}
	return NULL;
}

/* After a failure, this request is the one probe of its partitions' interval. */
static void
rl_probing(RlClient *c, const int *parts, int n, int64_t now)
{
	int			i;

	for (i = 0; i < n; i++)
		if (c->health[parts[i]].retry_db_at_us != 0)
			c->health[parts[i]].retry_db_at_us = now + c->backoff_us;
}

/*
 * The database answered (detail NULL), or failed for parts.  A failure names
 * no partition: those of parts already failing back off again, the others
 * stay as they are; only when none was failing do all of parts back off.
 */
static void
rl_health_set(RlClient *c, const int *parts, int n, int64_t now,
			  RlReason reason, const char *detail)
{
	bool		failing = false;
	int			i;

	for (i = 0; i < n; i++)
		failing |= c->health[parts[i]].retry_db_at_us != 0;
	for (i = 0; i < n; i++)
	{
		RlHealth   *h = &c->health[parts[i]];

		if (detail == NULL)
			h->retry_db_at_us = 0;
		else if (!failing || h->retry_db_at_us != 0)
		{
			h->retry_db_at_us = now + c->backoff_us;
			h->failure_reason = reason;
			snprintf(h->failure, sizeof(h->failure), "%s", detail);
		}
	}
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
	else if (evict_live && !t->oldest->pinned)
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
	if (!b->present)
		return INT64_MIN;
	/* a lock is kept until forgiven, as gcra_bucket_forgotten says */
	return b->tat_us > b->lock_until_us + b->lock_us ? b->tat_us :
		b->lock_until_us + b->lock_us;
}

/*
 * Put e in its place in the heap: by when both buckets are full again, or
 * last while pinned, so that making room for another entry of the same call
 * never forgets it.
 */
static void
rl_entry_fix(RlTable *t, RlEntry *e)
{
	e->full_at_us = rl_bucket_full_at(&e->precheck);
	if (rl_bucket_full_at(&e->memory) > e->full_at_us)
		e->full_at_us = rl_bucket_full_at(&e->memory);
	if (e->pinned)
		e->full_at_us = INT64_MAX;
	rl_heap_fix(t, e);
}

/* Set one of e's buckets and keep the heap in order. */
static void
rl_entry_set(RlTable *t, RlEntry *e, GcraBucket *bucket, int64_t tat_us,
			 int64_t interval_us)
{
	bucket->present = true;
	bucket->tat_us = tat_us;
	bucket->interval_us = interval_us;
	rl_entry_fix(t, e);
}

static void
rl_entry_pin(RlTable *t, RlEntry *e, bool pinned)
{
	e->pinned = pinned;
	rl_entry_fix(t, e);
}

/* Store decision d of a bucket of e, its lock included. */
static void
rl_entry_store(RlTable *t, RlEntry *e, GcraBucket *bucket,
			   const GcraDecision *d, int64_t interval_us)
{
	bucket->lock_until_us = d->new_lock_until_us;
	bucket->lock_us = d->new_lock_us;
	rl_entry_set(t, e, bucket, d->new_tat_us, interval_us);
}

/* Decide cost against one bucket of e, storing what the decision says. */
static GcraDecision
rl_entry_decide(RlTable *t, RlEntry *e, GcraBucket *bucket,
				const GcraLimit *limit, int64_t now, int32_t cost)
{
	GcraDecision d = gcra_decide(limit, bucket, now, cost);

	if (d.store)
		rl_entry_store(t, e, bucket, &d, limit->interval_us);
	return d;
}

/* A denial with nothing in it, the error kept: what a refused call leaves. */
static void
rl_deny(RlDecision *out)
{
	out->allowed = false;
	out->remaining = 0;
	out->retry_after = 0;
	out->reset_after = 0;
	out->source = RL_SOURCE_DATABASE;
}

static void
rl_deny_all(RlDecisionAll *out)
{
	out->allowed = false;
	out->remaining = 0;
	out->retry_after = 0;
	out->reset_after = 0;
	out->binding = 0;
	out->source = RL_SOURCE_DATABASE;
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

/*
 * The status of an error that a retry cannot fix, which request it is about
 * ("element N of the arrays of rl_take_all_detail" in its context; 0 when
 * it does not say), and into *error what the server said; RL_OK for any
 * other failure, an outage.
 */
static RlStatus
rl_refusal(const PGresult *res, int n, int *element, RlError *error)
{
	RlStatus	status = RL_OK;
	const char *state;
	const char *context;
	const char *at;

	if (res == NULL || PQresultStatus(res) != PGRES_FATAL_ERROR ||
		(state = PQresultErrorField(res, PG_DIAG_SQLSTATE)) == NULL)
		return RL_OK;
	context = PQresultErrorField(res, PG_DIAG_CONTEXT);
	at = context ? strstr(context, "element ") : NULL;
	*element = at != NULL ? atoi(at + 8) - 1 : 0;
	if (*element < 0 || *element >= n)
		*element = 0;
	if (strcmp(state, "42501") == 0)
		status = RL_NOT_PERMITTED;
	else if (strcmp(state, "42704") == 0)
		status = RL_UNKNOWN_LIMITER;
	else if (strncmp(state, "22", 2) == 0)
		status = RL_REFUSED;
	if (status != RL_OK)
	{
		snprintf(error->sqlstate, sizeof(error->sqlstate), "%s", state);
		error->from_server = true;
		rl_error_text(error->message, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		rl_error_text(error->detail, PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL));
		rl_error_text(error->hint, PQresultErrorField(res, PG_DIAG_MESSAGE_HINT));
	}
	return status;
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
rl_query(RlClient *c, RlConnection *slot, const char *query, int nparams,
		 const char *const *values, int64_t deadline, PGresult **result,
		 char *detail, size_t len)
{
	PGconn	   *conn = slot->conn;
	PGresult   *res;
	int			flushed;

	/* an unnamed statement: nothing outlives the transaction (PgBouncer) */
	if (!PQsendQueryParams(conn, query, nparams, NULL, values, NULL, NULL, 0))
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

/*
 * Run query on a pooled connection within the deadline, after reading
 * rl_policies into *policies when policies is not NULL.  The results are
 * the caller's to clear, an error's too (its SQLSTATE may matter).
 */
static RlDbResult
rl_db_call(RlClient *c, const char *query, int nparams,
		   const char *const *values, PGresult **policies, int64_t deadline,
		   PGresult **result, char *detail, size_t len)
{
	bool		second_try = false;

	for (;;)
	{
		RlConnection *slot = rl_pool_acquire(c, deadline);
		RlDbResult	r;
		bool		reused;
		bool		dead;

		*result = NULL;
		if (policies != NULL)
			*policies = NULL;
		if (slot == NULL)
		{
			snprintf(detail, len, "no free connection within %d ms (pool_size %d)",
					 c->deadline_ms, c->pool_size);
			return RL_DB_BUSY;
		}
		reused = slot->conn != NULL;
		r = reused ? RL_DB_OK : rl_connect(c, slot, deadline, detail, len);
		if (r == RL_DB_OK && policies != NULL)
		{
			bool		at_12 = atomic_load(&c->policies_12);

			r = rl_query(c, slot, at_12 ? c->query_policies_12 : c->query_policies,
						 0, NULL, deadline, policies, detail, len);
			/* a 1.2 database has no lockout columns: read its own */
			if (r == RL_DB_ERROR && !at_12 && *policies != NULL &&
				PQresultErrorField(*policies, PG_DIAG_SQLSTATE) != NULL &&
				strcmp(PQresultErrorField(*policies, PG_DIAG_SQLSTATE), "42703") == 0 &&
				PQtransactionStatus(slot->conn) == PQTRANS_IDLE)
			{
				PQclear(*policies);
				*policies = NULL;
				atomic_store(&c->policies_12, true);
				r = rl_query(c, slot, c->query_policies_12, 0, NULL, deadline,
							 policies, detail, len);
			}
		}
		if (r == RL_DB_OK)
			r = rl_query(c, slot, query, nparams, values, deadline, result,
						 detail, len);
		/* a pooled connection the server closed, e.g. by a restart */
		dead = reused && r == RL_DB_ERROR && PQstatus(slot->conn) != CONNECTION_OK;
		rl_pool_release(c, slot,
						r != RL_DB_TIMEOUT && slot->conn != NULL &&
						PQstatus(slot->conn) == CONNECTION_OK &&
						PQtransactionStatus(slot->conn) == PQTRANS_IDLE,
						dead);
		if (!dead || second_try)
			return r;
		PQclear(*result);
		if (policies != NULL)
			PQclear(*policies);
		/* the server may be back with a new session: try one once */
		second_try = true;
	}
}

/* One decision by rl_take on a pooled connection, within the deadline. */
static RlDbResult
rl_db_take(RlClient *c, const char *limiter, const char *key, double rate,
		   int32_t burst, int32_t cost, int64_t deadline, RlDecision *out,
		   RlStatus *refused, char *detail, size_t len)
{
	int			element;

	char		rate_text[32];
	char		burst_text[16];
	char		cost_text[16];
	const char *values[5] = {limiter, key, rate_text, burst_text, cost_text};
	PGresult   *res;
	RlDbResult	r;

	/* %.17g: the server reads back the same double */
	snprintf(rate_text, sizeof(rate_text), "%.17g", rate);
	snprintf(burst_text, sizeof(burst_text), "%d", (int) burst);
	snprintf(cost_text, sizeof(cost_text), "%d", (int) cost);
	r = rl_db_call(c, c->query, 5, values, NULL, deadline, &res, detail, len);
	if (r == RL_DB_ERROR &&
		(*refused = rl_refusal(res, 1, &element, &out->error)) != RL_OK)
		r = RL_DB_REFUSED;
	else if (r == RL_DB_OK && !rl_parse_decision(res, out))
	{
		snprintf(detail, len, "rl_take answered something that is not a decision");
		r = RL_DB_ERROR;
	}
	PQclear(res);
	return r;
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
 * Count a decision in memory and warn for each limiter whose warning is
 * due.  Called with c->lock held; releases it (warnings run outside it).
 */
static void
rl_fallback_done(RlClient *c, const char *const *limiters, int n, int64_t now,
				 RlReason reason, const char *detail)
{
	RlWarning	warn[RL_MAX_REQUESTS];
	char		message[1024];
	int			i;
	int			j;

	c->stats.fallback++;
	if (reason == RL_REASON_TIMEOUT)
		c->stats.fallback_timeout++;
	else
		c->stats.fallback_error++;
	for (i = 0; i < n; i++)
	{
		/* a limiter named twice in one call warns once */
		for (j = 0; j < i && strcmp(limiters[j], limiters[i]) != 0; j++)
			;
		warn[i] = j < i ? RL_WARN_NONE : rl_warning_due(c, limiters[i], now);
	}
	pthread_mutex_unlock(&c->lock);
	for (i = 0; i < n; i++)
	{
		if (warn[i] == RL_WARN_LIMITER)
			snprintf(message, sizeof(message),
					 "limiter \"%s\" is decided in memory at the same limit: the database failed (%s: %s); it is tried again at most every %d ms",
					 limiters[i], reason == RL_REASON_TIMEOUT ? "timeout" : "error",
					 detail, c->backoff_ms);
		else if (warn[i] == RL_WARN_SUMMARY)
			snprintf(message, sizeof(message),
					 "more than %d limiters are decided in memory at the same limit: the database failed (%s: %s); it is tried again at most every %d ms; only %d are named, each at most once per %d ms, and this line comes at most once per %d ms",
					 RL_MAX_WARNED_LIMITERS,
					 reason == RL_REASON_TIMEOUT ? "timeout" : "error", detail,
					 c->backoff_ms, RL_MAX_WARNED_LIMITERS,
					 c->warning_interval_ms, c->warning_interval_ms);
		if (warn[i] != RL_WARN_NONE)
			c->warning(c->warning_arg, warn[i] == RL_WARN_LIMITER ? limiters[i] : "",
					   message);
	}
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
	rl_fallback_done(c, &limiter, 1, now, reason, detail);
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

/* rl_client_take, its decision a denial with no error yet. */
static RlStatus
rl_take_explicit(RlClient *c, const char *limiter, const char *key,
				 double rate, int32_t burst, int32_t cost, RlDecision *decision)
{
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
	RlHealth   *h;
	int			part;
	char		detail[RL_DETAIL_LEN];

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
	part = rl_partition(c, limiter, key);
	deadline = rl_now_us() + c->deadline_us;

	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	h = rl_backing_off(c, &part, 1, now);
	if (h != NULL)
	{
		/* in the backoff: the failure that started it is the reason */
		snprintf(detail, sizeof(detail), "%s", h->failure);
		return rl_fallback(c, id, &limit, now, cost, limiter,
						   h->failure_reason, detail, decision);
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
	rl_probing(c, &part, 1, now);
	pthread_mutex_unlock(&c->lock);

	r = rl_db_take(c, limiter, key, rate, burst, cost, deadline, decision,
				   &status, detail, sizeof(detail));

	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (r == RL_DB_REFUSED)
	{
		/* the database answered: bad use, neither a failure nor a decision */
		rl_health_set(c, &part, 1, now, 0, NULL);
		pthread_mutex_unlock(&c->lock);
		rl_deny(decision);
		return status;
	}
	if (r == RL_DB_OK)
	{
		rl_health_set(c, &part, 1, now, 0, NULL);
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
		rl_health_set(c, &part, 1, now, reason, detail);
	return rl_fallback(c, id, &limit, now, cost, limiter, reason, detail,
					   decision);
}

RlStatus
rl_client_take(RlClient *client, const char *limiter, const char *key,
			   double rate, int32_t burst, int32_t cost, RlDecision *decision)
{
	if (decision == NULL)
		return RL_NULL_ARGUMENT;
	rl_deny(decision);
	rl_error_clear(&decision->error);
	return rl_refused(&decision->error, client == NULL ? RL_NULL_ARGUMENT :
					  rl_take_explicit(client, limiter, key, rate, burst,
									   cost, decision));
}


/* ---- decisions by policy, and over several limits ---- */

/* Which SQL call decides. */
typedef enum RlCall
{
	RL_CALL_POLICY,				/* rl_take(limiter, key, cost) */
	RL_CALL_ALL,				/* rl_take_all_detail(..., rates, bursts, costs) */
	RL_CALL_ALL_POLICY			/* rl_take_all_detail(limiters, keys, costs) */
} RlCall;

/* One request as the client decides it. */
typedef struct RlItem
{
	const char *limiter;
	const char *key;
	double		rate;
	int32_t		burst;
	int32_t		cost;
	uint64_t	id[2];
	int			partition;
	bool		known;			/* rate and burst known: explicit, or read */
	bool		shadow;
	GcraLimit	limit;
} RlItem;

static int
rl_policy_cmp(const void *a, const void *b)
{
	return strcmp(((const RlPolicyRow *) a)->limiter,
				  ((const RlPolicyRow *) b)->limiter);
}

static void
rl_policies_free(RlPolicyRow *policies, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		free(policies[i].limiter);
	free(policies);
}

/* limiter's row of the last read of rl_policies, or NULL; c->lock held. */
static const RlPolicyRow *
rl_policy_find(const RlClient *c, const char *limiter)
{
	RlPolicyRow want = {.limiter = (char *) limiter};

	return c->npolicies == 0 ? NULL :
		bsearch(&want, c->policies, c->npolicies, sizeof(RlPolicyRow),
				rl_policy_cmp);
}

/*
 * The items' limits from the last read of rl_policies (c->lock held).  A
 * limiter not in it, or whose policy this client cannot use, is not known:
 * the database decides on it without a pre-check.
 */
static void
rl_policies_apply(RlClient *c, RlItem *items, int n)
{
	int64_t		wall = rl_clock_us(CLOCK_REALTIME) - RL_PG_EPOCH_US;
	int			i;

	for (i = 0; i < n; i++)
	{
		const RlPolicyRow *p = rl_policy_find(c, items[i].limiter);

		items[i].known = p != NULL &&
			gcra_limit_init(&items[i].limit, p->rate, p->burst, wall,
							RL_PG_MAX_TIME_US) == GCRA_OK &&
			(p->lockout_us == 0 ||
			 gcra_lockout_init(&items[i].limit, p->lockout_us, p->lockout_growth,
							   p->lockout_max_us, wall,
							   RL_PG_MAX_TIME_US) == GCRA_OK);
		if (items[i].known)
		{
			items[i].rate = p->rate;
			items[i].burst = p->burst;
			items[i].shadow = p->shadow;
		}
	}
}

/* rl_policies as read; false when the answer is not that table. */
static bool
rl_policies_parse(const PGresult *res, RlPolicyRow **policies, int *count)
{
	int			n = PQntuples(res);
	RlPolicyRow *p;
	int			i;

	if (PQnfields(res) != 4 && PQnfields(res) != 7)
		return false;
	p = calloc(n > 0 ? n : 1, sizeof(RlPolicyRow));
	if (p == NULL)
		return false;
	for (i = 0; i < n; i++)
	{
		p[i].limiter = strdup(PQgetvalue(res, i, 0));
		p[i].rate = strtod(PQgetvalue(res, i, 1), NULL);
		p[i].burst = (int32_t) strtol(PQgetvalue(res, i, 2), NULL, 10);
		p[i].shadow = strcmp(PQgetvalue(res, i, 3), "t") == 0;
		p[i].lockout_growth = 1.0;
		if (PQnfields(res) == 7 && !PQgetisnull(res, i, 4))
		{
			p[i].lockout_us = strtoll(PQgetvalue(res, i, 4), NULL, 10);
			p[i].lockout_growth = strtod(PQgetvalue(res, i, 5), NULL);
			p[i].lockout_max_us = PQgetisnull(res, i, 6) ? 0 :
				strtoll(PQgetvalue(res, i, 6), NULL, 10);
		}
		if (p[i].limiter == NULL)
		{
			rl_policies_free(p, i);
			return false;
		}
	}
	qsort(p, n, sizeof(RlPolicyRow), rl_policy_cmp);
	*policies = p;
	*count = n;
	return true;
}

/* An array literal of the items' limiters or keys, every element quoted. */
static char *
rl_text_array(const RlItem *items, int n, bool keys)
{
	size_t		size = 3;
	char	   *text;
	char	   *p;
	int			i;

	for (i = 0; i < n; i++)
		size += 2 * strlen(keys ? items[i].key : items[i].limiter) + 3;
	text = malloc(size);
	if (text == NULL)
		return NULL;
	p = text;
	*p++ = '{';
	for (i = 0; i < n; i++)
	{
		const char *s = keys ? items[i].key : items[i].limiter;

		if (i > 0)
			*p++ = ',';
		*p++ = '"';
		for (; *s != '\0'; s++)
		{
			if (*s == '"' || *s == '\\')
				*p++ = '\\';
			*p++ = *s;
		}
		*p++ = '"';
	}
	strcpy(p, "}");
	return text;
}

/* An array literal of the items' rates (0), bursts (1) or costs (2). */
static void
rl_number_array(const RlItem *items, int n, int which, char *text)
{
	char	   *p = text;
	int			i;

	*p++ = '{';
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			*p++ = ',';
		/* %.17g: the server reads back the same double */
		if (which == 0)
			p += sprintf(p, "%.17g", items[i].rate);
		else
			p += sprintf(p, "%d", (int) (which == 1 ? items[i].burst : items[i].cost));
	}
	strcpy(p, "}");
}

/* rl_take_all's row and each request's reset_after; false when it is not. */
static bool
rl_parse_decision_all(const PGresult *res, const RlItem *items, int n,
					  RlDecisionAll *out, double *resets)
{
	const char *p;
	int			i;

	if (PQntuples(res) != 1 || PQnfields(res) != 6 ||
		PQgetisnull(res, 0, 4) || PQgetisnull(res, 0, 5))
		return false;
	out->allowed = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	out->remaining = (int32_t) strtol(PQgetvalue(res, 0, 1), NULL, 10);
	if (PQgetisnull(res, 0, 2))
		out->retry_after = INFINITY;
	else if (!rl_parse_double(PQgetvalue(res, 0, 2), &out->retry_after))
		return false;
	if (!rl_parse_double(PQgetvalue(res, 0, 3), &out->reset_after))
		return false;
	for (i = 0; i < n && strcmp(items[i].limiter, PQgetvalue(res, 0, 4)) != 0; i++)
		;
	if (i == n)
		return false;
	out->binding = i;
	out->source = RL_SOURCE_DATABASE;
	/* {r1,r2,...} in the order of the requests */
	p = PQgetvalue(res, 0, 5);
	for (i = 0; i < n; i++)
	{
		char	   *end;

		if (*p != (i == 0 ? '{' : ','))
			return false;
		resets[i] = strtod(p + 1, &end);
		if (end == p + 1 || !isfinite(resets[i]) || resets[i] < 0)
			return false;
		p = end;
	}
	return strcmp(p, "}") == 0;
}

/*
 * One decision of call by the database.  When read_policies, rl_policies is
 * read first, on the same connection, into *policies.  RL_DB_REFUSED: bad
 * use, *refused about items[*element].
 */
static RlDbResult
rl_db_decide(RlClient *c, RlCall call, const RlItem *items, int n,
			 bool read_policies, int64_t deadline, RlDecisionAll *out,
			 double *resets, RlPolicyRow **policies, int *npolicies,
			 RlStatus *refused, int *element, char *detail, size_t len)
{
	char	   *limiters = NULL;
	char	   *keys = NULL;
	char		rates[RL_MAX_REQUESTS * 26 + 2];
	char		bursts[RL_MAX_REQUESTS * 12 + 2];
	char		costs[RL_MAX_REQUESTS * 12 + 2];
	const char *values[5];
	const char *query;
	int			nparams;
	PGresult   *res;
	PGresult   *read = NULL;
	RlDbResult	r;

	if (call == RL_CALL_POLICY)
	{
		snprintf(costs, sizeof(costs), "%d", (int) items[0].cost);
		values[0] = items[0].limiter;
		values[1] = items[0].key;
		values[2] = costs;
		query = c->query_policy;
		nparams = 3;
	}
	else
	{
		limiters = rl_text_array(items, n, false);
		keys = rl_text_array(items, n, true);
		if (limiters == NULL || keys == NULL)
		{
			free(limiters);
			free(keys);
			snprintf(detail, len, "out of memory");
			return RL_DB_ERROR;
		}
		rl_number_array(items, n, 0, rates);
		rl_number_array(items, n, 1, bursts);
		rl_number_array(items, n, 2, costs);
		values[0] = limiters;
		values[1] = keys;
		values[2] = call == RL_CALL_ALL ? rates : costs;
		values[3] = bursts;
		values[4] = costs;
		query = call == RL_CALL_ALL ? c->query_all : c->query_all_policy;
		nparams = call == RL_CALL_ALL ? 5 : 3;
	}
	r = rl_db_call(c, query, nparams, values, read_policies ? &read : NULL,
				   deadline, &res, detail, len);
	free(limiters);
	free(keys);

	if (read != NULL && PQresultStatus(read) == PGRES_TUPLES_OK &&
		!rl_policies_parse(read, policies, npolicies) && r == RL_DB_OK)
	{
		snprintf(detail, len, "rl_policies could not be read");
		r = RL_DB_ERROR;
	}
	PQclear(read);
	if (r == RL_DB_ERROR &&
		(*refused = rl_refusal(res, n, element, &out->error)) != RL_OK)
		r = RL_DB_REFUSED;
	else if (r == RL_DB_OK && call == RL_CALL_POLICY)
	{
		RlDecision	d;

		if (rl_parse_decision(res, &d))
		{
			out->allowed = d.allowed;
			out->remaining = d.remaining;
			out->retry_after = d.retry_after;
			out->reset_after = d.reset_after;
			out->binding = 0;
			out->source = RL_SOURCE_DATABASE;
			resets[0] = d.reset_after;
		}
		else
		{
			snprintf(detail, len, "rl_take answered something that is not a decision");
			r = RL_DB_ERROR;
		}
	}
	else if (r == RL_DB_OK && !rl_parse_decision_all(res, items, n, out, resets))
	{
		snprintf(detail, len, "rl_take_all_detail answered something that is not a decision");
		r = RL_DB_ERROR;
	}
	PQclear(res);
	return r;
}

/* The answer of a combined decision. */
static void
rl_decision_from_combined(RlDecisionAll *out, const GcraCombined *c,
						  RlSource source)
{
	out->allowed = c->allowed;
	out->remaining = c->remaining;
	out->retry_after = c->retry_known ? c->retry_after_us / 1e6 : INFINITY;
	out->reset_after = c->reset_after_us / 1e6;
	out->binding = c->binding;
	out->source = source;
}

/* The entry of id if memory holds it, without using it. */
static RlEntry *
rl_table_find(RlTable *t, const uint64_t id[2])
{
	RlEntry    *e;

	for (e = t->slots[id[0] & t->mask]; e != NULL; e = e->chain)
		if (e->id[0] == id[0] && e->id[1] == id[1])
			return e;
	return NULL;
}

/*
 * The call's requests of a known limit against their in-memory buckets (the
 * database's last answers), each of its own cost or a peek; which[k] is the
 * item of request k.  Answers how many there are.
 */
static int
rl_memory_requests(RlClient *c, const RlItem *items, int n, bool peek,
				   GcraRequest *requests, int *which)
{
	int			m = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		RlEntry    *e = rl_table_find(&c->table, items[i].id);

		if (!items[i].known)
			continue;
		requests[m].limit = items[i].limit;
		requests[m].bucket = e != NULL ? e->memory : (GcraBucket) {0};
		requests[m].cost = peek ? 0 : items[i].cost;
		requests[m].shadow = items[i].shadow;
		which[m++] = i;
	}
	return m;
}

/*
 * Whether a key of the call is locked by the database's last answer, carried
 * forward in time: then out is the answer the database would give (source
 * local), and the call is refused without a round trip until the lock ends.
 * c->lock held.
 */
static bool
rl_locked_all(RlClient *c, const RlItem *items, int n, int64_t now,
			  RlDecisionAll *out)
{
	GcraRequest requests[RL_MAX_REQUESTS];
	GcraDecision d[RL_MAX_REQUESTS];
	int			which[RL_MAX_REQUESTS];
	bool		locked = false;
	GcraCombined take;
	int			m = rl_memory_requests(c, items, n, false, requests, which);
	int			i;

	if (m == 0)
		return false;
	take = gcra_decide_all(requests, m, now, d);
	for (i = 0; i < m; i++)
		if (d[i].locked && !d[i].lock_started && !requests[i].shadow)
			locked = true;
	if (!locked || take.allowed)
		return false;
	rl_decision_from_combined(out, &take, RL_SOURCE_LOCAL);
	out->binding = which[take.binding];
	return true;
}

/*
 * The pre-check of a call, all or nothing over the buckets of twice the
 * burst (gcra_decide_all): true when it refuses, with out set to the
 * database's last answers for the keys carried forward in time, and the
 * later of the times at which the database and the pre-check would let the
 * call through.  A request of cost > burst, a shadow one (it never denies)
 * and one of an unknown limit are not pre-checked.  c->lock held.
 */
static bool
rl_precheck_all(RlClient *c, const RlItem *items, int n, int64_t now,
				RlDecisionAll *out)
{
	GcraRequest requests[RL_MAX_REQUESTS];
	GcraDecision d[RL_MAX_REQUESTS];
	RlEntry    *entries[RL_MAX_REQUESTS];
	int			which[RL_MAX_REQUESTS];
	int			known[RL_MAX_REQUESTS];
	GcraCombined pre;
	GcraCombined peek;
	GcraCombined take;
	int64_t		wall = rl_clock_us(CLOCK_REALTIME) - RL_PG_EPOCH_US;
	int			m = 0;
	int			i;

	if (rl_locked_all(c, items, n, now, out))
		return true;
	for (i = 0; i < n; i++)
	{
		const RlItem *it = &items[i];
		GcraRequest *r = &requests[m];

		if (!it->known || it->shadow || it->cost > it->burst ||
			gcra_limit_init(&r->limit, it->rate,
							it->burst > INT32_MAX / 2 ? INT32_MAX : 2 * it->burst,
							wall, RL_PG_MAX_TIME_US) != GCRA_OK)
			continue;
		entries[m] = rl_table_get(&c->table, it->id, now, false);
		if (entries[m] == NULL)
			continue;
		rl_entry_pin(&c->table, entries[m], true);
		r->bucket = entries[m]->precheck;
		r->cost = it->cost;
		r->shadow = false;
		which[m++] = i;
	}
	if (m == 0)
		return false;
	pre = gcra_decide_all(requests, m, now, d);
	for (i = 0; i < m; i++)
	{
		if (d[i].store)
			rl_entry_set(&c->table, entries[i], &entries[i]->precheck,
						 d[i].new_tat_us, requests[i].limit.interval_us);
		rl_entry_pin(&c->table, entries[i], false);
	}
	if (pre.allowed)
		return false;

	/* the database's last answers, neither stored */
	m = rl_memory_requests(c, items, n, true, requests, known);
	peek = gcra_decide_all(requests, m, now, d);
	for (i = 0; i < m; i++)
		requests[i].cost = items[known[i]].cost;
	take = gcra_decide_all(requests, m, now, d);
	rl_decision_from_combined(out, &peek, RL_SOURCE_LOCAL);
	out->allowed = false;
	out->binding = which[pre.binding];
	if (take.allowed || (take.retry_known && take.retry_after_us < pre.retry_after_us))
		out->retry_after = pre.retry_after_us / 1e6;
	else
		out->retry_after = take.retry_known ? take.retry_after_us / 1e6 : INFINITY;
	return true;
}

/*
 * Decide in memory during an outage, all or nothing (gcra_decide_all), by
 * the last known limits; count it and warn when due.  A call with a limiter
 * whose policy was never read, or a key without a bucket and without room,
 * is refused: never allowed for want of a limit or of memory.  Called with
 * c->lock held; releases it.
 */
static RlStatus
rl_fallback_all(RlClient *c, const RlItem *items, int n, int64_t now,
				RlReason reason, const char *detail, RlDecisionAll *out)
{
	GcraRequest requests[RL_MAX_REQUESTS] = {0};
	GcraDecision d[RL_MAX_REQUESTS];
	RlEntry    *entries[RL_MAX_REQUESTS];
	const char *limiters[RL_MAX_REQUESTS];
	int			got = 0;
	int			i;

	for (i = 0; i < n; i++)
		limiters[i] = items[i].limiter;
	for (i = 0; i < n; i++)
	{
		if (!items[i].known)
		{
			/* refused until the database answers again */
			int64_t		wait = 0;
			int			j;

			for (j = 0; j < n; j++)
				if (c->health[items[j].partition].retry_db_at_us - now > wait)
					wait = c->health[items[j].partition].retry_db_at_us - now;

			out->allowed = false;
			out->remaining = 0;
			out->retry_after = wait / 1e6;
			out->reset_after = wait / 1e6;
			out->binding = i;
			out->source = RL_SOURCE_FALLBACK;
			c->stats.no_policy++;
			rl_fallback_done(c, limiters, n, now, reason, detail);
			return RL_OK;
		}
	}
	for (; got < n; got++)
	{
		entries[got] = rl_table_get(&c->table, items[got].id, now, false);
		if (entries[got] == NULL)
			break;
		rl_entry_pin(&c->table, entries[got], true);
		requests[got].limit = items[got].limit;
		requests[got].bucket = entries[got]->memory;
		requests[got].cost = items[got].cost;
		requests[got].shadow = items[got].shadow;
	}
	if (got == n)
	{
		GcraCombined combined = gcra_decide_all(requests, n, now, d);

		for (i = 0; i < n; i++)
			if (d[i].store)
				rl_entry_store(&c->table, entries[i], &entries[i]->memory,
							   &d[i], requests[i].limit.interval_us);
		rl_decision_from_combined(out, &combined, RL_SOURCE_FALLBACK);
	}
	for (i = 0; i < got; i++)
		rl_entry_pin(&c->table, entries[i], false);
	if (got < n && c->table.count < c->table.max)
	{
		/* room, but no memory for a bucket: never allowed for want of it */
		pthread_mutex_unlock(&c->lock);
		return RL_NO_MEMORY;
	}
	if (got < n)
	{
		double		room_after = (c->table.heap[0]->full_at_us - now) / 1e6;

		out->allowed = false;
		out->remaining = 0;
		/* cost > burst is never allowed, with a bucket or without */
		out->retry_after = items[got].cost > items[got].burst ? INFINITY : room_after;
		out->reset_after = room_after;
		out->binding = got;
		out->source = RL_SOURCE_FALLBACK;
		c->stats.no_room++;
	}
	rl_fallback_done(c, limiters, n, now, reason, detail);
	return RL_OK;
}

/*
 * The lock of bucket as the database's answer shows it; the answer has no
 * lock state.  A denial of the binding request, enforced, of cost <= burst,
 * by a policy with a lockout is a lock of retry_after from now: the lock a
 * bucket already held (its lock_us kept), else one that starts (lock_us =
 * retry_after, which a lock started by another process makes shorter than
 * the database's: the next lockout in memory is never longer than the
 * database's).  An allowed answer ends a lock memory holds (rl_reset).
 */
static void
rl_learn_lock(GcraBucket *bucket, const RlItem *item, const RlDecisionAll *out,
			  bool binding, int64_t now)
{
	bool		held = bucket->present && now < bucket->lock_until_us;

	if (out->allowed && held)
	{
		bucket->lock_until_us = 0;
		bucket->lock_us = 0;
	}
	else if (!out->allowed && binding && item->limit.lockout_us > 0 &&
			 !item->shadow && item->cost <= item->burst && isfinite(out->retry_after))
	{
		int64_t		length = rl_seconds_to_us(out->retry_after,
											  item->limit.lockout_max_us);

		bucket->lock_until_us = now + length;
		if (!held)
			bucket->lock_us = length;
	}
}

/*
 * A decision of call over items, whose arguments are checked: as
 * rl_client_take decides, the pre-check and the fallback deciding all or
 * nothing.  A call by policy reads rl_policies first when the last read is
 * older than policy_refresh_ms (on the same connection, within the same
 * deadline); during an outage, the last read decides.
 */
static RlStatus
rl_decide(RlClient *c, RlCall call, RlItem *items, int n, RlDecisionAll *out)
{
	bool		by_policy = call != RL_CALL_ALL;
	bool		read_policies = false;
	int64_t		deadline = rl_now_us() + c->deadline_us;
	int64_t		now;
	double		resets[RL_MAX_REQUESTS];
	RlPolicyRow *policies = NULL;
	int			npolicies = 0;
	RlStatus	refused = RL_OK;
	int			element = 0;
	RlDbResult	r;
	RlReason	reason;
	RlHealth   *h;
	int			parts[RL_MAX_REQUESTS];
	char		detail[RL_DETAIL_LEN];
	int			i;

	for (i = 0; i < n; i++)
		parts[i] = items[i].partition;
	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (by_policy)
	{
		rl_policies_apply(c, items, n);
		/* this call reads them; the others meanwhile use the last read */
		if (now >= c->policies_due_us)
		{
			read_policies = true;
			c->policies_due_us = now + c->policy_refresh_us;
		}
	}
	h = rl_backing_off(c, parts, n, now);
	if (h != NULL)
	{
		snprintf(detail, sizeof(detail), "%s", h->failure);
		if (read_policies)
			c->policies_due_us = 0;
		return rl_fallback_all(c, items, n, now, h->failure_reason, detail, out);
	}
	/* a due read goes to the database: the pre-check waits for its policy */
	if (!read_policies && rl_precheck_all(c, items, n, now, out))
	{
		c->stats.local++;
		pthread_mutex_unlock(&c->lock);
		return RL_OK;
	}
	rl_probing(c, parts, n, now);
	pthread_mutex_unlock(&c->lock);

	r = rl_db_decide(c, call, items, n, read_policies, deadline, out, resets,
					 &policies, &npolicies, &refused, &element, detail,
					 sizeof(detail));

	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (policies != NULL)
	{
		rl_policies_free(c->policies, c->npolicies);
		c->policies = policies;
		c->npolicies = npolicies;
		c->stats.policy_reads++;
		rl_policies_apply(c, items, n);
	}
	else if (read_policies)
		c->policies_due_us = 0;
	if (r == RL_DB_REFUSED)
	{
		/* the database answered: bad use, neither a failure nor a decision */
		rl_health_set(c, parts, n, now, 0, NULL);
		pthread_mutex_unlock(&c->lock);
		rl_deny_all(out);
		out->binding = element;
		return refused;
	}
	if (r == RL_DB_OK)
	{
		rl_health_set(c, parts, n, now, 0, NULL);
		c->stats.database++;
		/* each bucket's shared fill level, for an outage that starts now */
		for (i = 0; i < n; i++)
		{
			RlEntry    *e;

			if (!items[i].known)
			{
				/* a policy made since the last read: read them again */
				c->policies_due_us = 0;
				continue;
			}
			e = rl_table_get(&c->table, items[i].id, now, true);
			if (e != NULL)
			{
				rl_learn_lock(&e->memory, &items[i], out, i == out->binding, now);
				rl_entry_set(&c->table, e, &e->memory,
							 now + rl_seconds_to_us(resets[i], items[i].limit.tolerance_us),
							 items[i].limit.interval_us);
			}
		}
		pthread_mutex_unlock(&c->lock);
		return RL_OK;
	}
	reason = r == RL_DB_ERROR ? RL_REASON_ERROR : RL_REASON_TIMEOUT;
	if (r != RL_DB_BUSY)
		rl_health_set(c, parts, n, now, reason, detail);
	return rl_fallback_all(c, items, n, now, reason, detail, out);
}

/*
 * Check the requests of a multi-limit call as rl_take_all checks them, and
 * make its items; *bad is the request at fault.
 */
static RlStatus
rl_check_requests(RlClient *c, const RlRequest *requests, int n,
				  bool by_policy, RlItem *items, int *bad)
{
	int			i;
	int			j;

	*bad = 0;
	if (requests == NULL)
		return RL_NULL_ARGUMENT;
	if (n < 1 || n > RL_MAX_REQUESTS)
		return RL_BAD_COUNT;
	for (i = 0; i < n; i++)
	{
		const RlRequest *q = &requests[i];
		RlItem	   *it = &items[i];
		RlStatus	status;

		*bad = i;
		memset(it, 0, sizeof(*it));
		it->limiter = q->limiter;
		it->key = q->key;
		it->cost = q->cost;
		if (by_policy)
		{
			status = rl_check_names(q->limiter, q->key);
			if (status == RL_OK && q->cost < 0)
				status = RL_BAD_COST;
		}
		else
		{
			status = rl_check_arguments(q->limiter, q->key, q->rate, q->burst,
										q->cost, &it->limit);
			it->known = true;
			it->rate = q->rate;
			it->burst = q->burst;
		}
		if (status != RL_OK)
			return status;
		rl_identity(c, it->limiter, it->key, it->id);
		it->partition = rl_partition(c, it->limiter, it->key);
	}
	for (i = 0; i < n; i++)
	{
		for (j = 0; j < i; j++)
		{
			if (items[i].id[0] == items[j].id[0] && items[i].id[1] == items[j].id[1])
			{
				*bad = i;
				return RL_DUPLICATE;
			}
		}
	}
	return RL_OK;
}

static RlStatus
rl_take_all_call(RlClient *c, const RlRequest *requests, int n,
				 RlDecisionAll *decision, bool by_policy)
{
	RlItem		items[RL_MAX_REQUESTS];
	RlStatus	status;
	int			bad;

	if (decision == NULL)
		return RL_NULL_ARGUMENT;
	rl_deny_all(decision);
	rl_error_clear(&decision->error);
	if (c == NULL)
		return rl_refused(&decision->error, RL_NULL_ARGUMENT);
	status = rl_check_requests(c, requests, n, by_policy, items, &bad);
	if (status != RL_OK)
	{
		decision->binding = bad;
		return rl_refused(&decision->error, status);
	}
	return rl_refused(&decision->error,
					  rl_decide(c, by_policy ? RL_CALL_ALL_POLICY : RL_CALL_ALL,
								items, n, decision));
}

RlStatus
rl_client_take_all(RlClient *client, const RlRequest *requests, int n,
				   RlDecisionAll *decision)
{
	return rl_take_all_call(client, requests, n, decision, false);
}

RlStatus
rl_client_take_all_policy(RlClient *client, const RlRequest *requests, int n,
						  RlDecisionAll *decision)
{
	return rl_take_all_call(client, requests, n, decision, true);
}

RlStatus
rl_client_take_policy(RlClient *client, const char *limiter, const char *key,
					  int32_t cost, RlDecision *decision)
{
	RlItem		item = {.limiter = limiter, .key = key, .cost = cost};
	RlDecisionAll all;
	RlStatus	status;

	if (decision == NULL)
		return RL_NULL_ARGUMENT;
	rl_deny(decision);
	rl_error_clear(&decision->error);
	if (client == NULL)
		return rl_refused(&decision->error, RL_NULL_ARGUMENT);
	status = rl_check_names(limiter, key);
	if (status == RL_OK && cost < 0)
		status = RL_BAD_COST;
	if (status != RL_OK)
		return rl_refused(&decision->error, status);
	rl_identity(client, limiter, key, item.id);
	item.partition = rl_partition(client, limiter, key);
	rl_deny_all(&all);
	rl_error_clear(&all.error);
	status = rl_decide(client, RL_CALL_POLICY, &item, 1, &all);
	decision->allowed = all.allowed;
	decision->remaining = all.remaining;
	decision->retry_after = all.retry_after;
	decision->reset_after = all.reset_after;
	decision->source = all.source;
	if (status != RL_OK)
		decision->error = all.error;
	return rl_refused(&decision->error, status);
}

RlStatus
rl_client_policy(RlClient *client, const char *limiter, RlPolicy *policy)
{
	const RlPolicyRow *p;

	if (client == NULL || policy == NULL)
		return RL_NULL_ARGUMENT;
	memset(policy, 0, sizeof(*policy));
	if (limiter == NULL)
		return RL_NULL_LIMITER;
	pthread_mutex_lock(&client->lock);
	p = rl_policy_find(client, limiter);
	if (p != NULL)
	{
		policy->rate = p->rate;
		policy->burst = p->burst;
		policy->shadow = p->shadow;
		policy->lockout = p->lockout_us / 1e6;
		policy->lockout_growth = p->lockout_growth;
		policy->lockout_max = p->lockout_max_us / 1e6;
	}
	pthread_mutex_unlock(&client->lock);
	return p != NULL ? RL_OK : RL_UNKNOWN_LIMITER;
}


/* ---- refunds ---- */

/*
 * Give cost cells back to the live buckets of id in memory, at the T each
 * was stored with, as rl_refund does: tat := max(now, tat - cost * T), its
 * lock kept (a refund never ends a lockout).  True when the in-memory
 * limiter's bucket changed.  c->lock held.
 */
static bool
rl_refund_locally(RlClient *c, const uint64_t id[2], int64_t now, int32_t cost)
{
	RlEntry    *e = rl_table_find(&c->table, id);
	bool		changed = false;
	int			i;

	if (e == NULL)
		return false;
	for (i = 0; i < 2; i++)
	{
		GcraBucket *b = i == 0 ? &e->memory : &e->precheck;
		int64_t		tat;

		if (!b->present || b->tat_us <= now)
			continue;
		/* cost * T may overflow: when cost > (tat - now) / T, it passes now */
		tat = cost > (b->tat_us - now) / b->interval_us ? now :
			b->tat_us - cost * b->interval_us;
		if (tat < now)
			tat = now;
		changed |= i == 0 && tat != b->tat_us;
		b->tat_us = tat;
	}
	rl_entry_fix(&c->table, e);
	return changed;
}

/* rl_refund on a pooled connection, within the deadline. */
static RlDbResult
rl_db_refund(RlClient *c, const char *limiter, const char *key, int32_t cost,
			 int64_t deadline, RlRefund *out, RlStatus *refused, char *detail,
			 size_t len)
{
	char		cost_text[16];
	const char *values[3] = {limiter, key, cost_text};
	PGresult   *res;
	RlDbResult	r;
	int			element;

	snprintf(cost_text, sizeof(cost_text), "%d", (int) cost);
	r = rl_db_call(c, c->query_refund, 3, values, NULL, deadline, &res, detail, len);
	if (r == RL_DB_ERROR &&
		(*refused = rl_refusal(res, 1, &element, &out->error)) != RL_OK)
		r = RL_DB_REFUSED;
	else if (r == RL_DB_OK)
	{
		if (PQntuples(res) == 1 && PQnfields(res) == 1 && !PQgetisnull(res, 0, 0))
			out->refunded = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		else
		{
			snprintf(detail, len, "rl_refund answered something that is not a boolean");
			r = RL_DB_ERROR;
		}
	}
	PQclear(res);
	return r;
}

/* rl_client_refund, its arguments checked. */
static RlStatus
rl_refund_checked(RlClient *c, const char *limiter, const char *key,
				  int32_t cost, RlRefund *refund)
{
	uint64_t	id[2];
	int64_t		deadline = rl_now_us() + c->deadline_us;
	int64_t		now;
	RlStatus	refused = RL_OK;
	RlDbResult	r;
	int			part = rl_partition(c, limiter, key);
	char		detail[RL_DETAIL_LEN];

	rl_identity(c, limiter, key, id);
	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (rl_backing_off(c, &part, 1, now) != NULL)
	{
		refund->refunded = rl_refund_locally(c, id, now, cost);
		refund->source = RL_SOURCE_FALLBACK;
		pthread_mutex_unlock(&c->lock);
		return RL_OK;
	}
	rl_probing(c, &part, 1, now);
	pthread_mutex_unlock(&c->lock);

	r = rl_db_refund(c, limiter, key, cost, deadline, refund, &refused,
					 detail, sizeof(detail));

	pthread_mutex_lock(&c->lock);
	now = rl_now_us();
	if (r == RL_DB_OK || r == RL_DB_REFUSED)
		rl_health_set(c, &part, 1, now, 0, NULL);
	else if (r != RL_DB_BUSY)
		rl_health_set(c, &part, 1, now,
					  r == RL_DB_ERROR ? RL_REASON_ERROR : RL_REASON_TIMEOUT,
					  detail);
	if (r != RL_DB_REFUSED)
	{
		bool		changed = rl_refund_locally(c, id, now, cost);

		if (r != RL_DB_OK)
		{
			refund->refunded = changed;
			refund->source = RL_SOURCE_FALLBACK;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return refused;
}

RlStatus
rl_client_refund(RlClient *client, const char *limiter, const char *key,
				 int32_t cost, RlRefund *refund)
{
	RlStatus	status = RL_NULL_ARGUMENT;

	if (refund == NULL)
		return RL_NULL_ARGUMENT;
	refund->refunded = false;
	refund->source = RL_SOURCE_DATABASE;
	rl_error_clear(&refund->error);
	if (client != NULL)
		status = rl_check_names(limiter, key);
	if (status == RL_OK && cost < 0)
		status = RL_BAD_COST;
	if (status == RL_OK)
		status = rl_refund_checked(client, limiter, key, cost, refund);
	return rl_refused(&refund->error, status);
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
	options->policy_refresh_ms = 10000;
}

/*
 * text with each @ replaced by "schema". (the schema quoted as an
 * identifier), or by nothing without a schema.
 */
static char *
rl_build_query(const char *schema, const char *text)
{
	size_t		size = strlen(text) + 1;
	const char *t;
	char	   *query;
	char	   *p;

	for (t = text; *t != '\0'; t++)
		if (*t == '@' && schema != NULL)
			size += 2 * strlen(schema) + 3;
	query = malloc(size);
	if (query == NULL)
		return NULL;
	p = query;
	for (t = text; *t != '\0'; t++)
	{
		const char *s;

		if (*t != '@')
		{
			*p++ = *t;
			continue;
		}
		if (schema == NULL)
			continue;
		*p++ = '"';
		for (s = schema; *s != '\0'; s++)
		{
			if (*s == '"')
				*p++ = '"';
			*p++ = *s;
		}
		*p++ = '"';
		*p++ = '.';
	}
	*p = '\0';
	return query;
}

/*
 * The multi-limit queries also answer each request's reset_after after the
 * call, in the order of the requests, from rl_take_all_detail's requests, so
 * that an outage continues from every bucket's shared fill level.
 */
/*
 * An interval in microseconds as the server counts it (30-day months, exact
 * numeric): extract(epoch) would count a year as 365.25 days.
 */
#define RL_INTERVAL_US(col) "((((extract(year FROM " col ") * 12 + extract(month FROM " col ")) * 30" \
	" + extract(day FROM " col ")) * 86400 + extract(epoch FROM " col " - date_trunc('day', " col ")))" \
	" * 1000000)::bigint"
#define RL_DECISION_COLUMNS "SELECT allowed, remaining, retry_after, reset_after FROM "
#define RL_ALL_COLUMNS "SELECT a.allowed, a.remaining, a.retry_after, a.reset_after, a.limiter, " \
	"ARRAY(SELECT r.reset_after FROM unnest(a.requests) WITH ORDINALITY " \
	"AS r(allowed, remaining, retry_after, reset_after, i) ORDER BY r.i) FROM "

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
	free(c->health);
	free(c->query);
	free(c->query_policy);
	free(c->query_all);
	free(c->query_all_policy);
	free(c->query_refund);
	free(c->query_policies);
	free(c->query_policies_12);
	rl_policies_free(c->policies, c->npolicies);
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
		options->policy_refresh_ms < 1 || options->partitions < 0 ||
		options->partitions > 65536 ||
		(options->schema != NULL && options->schema[0] == '\0'))
		return RL_BAD_OPTION;
	if (!PQisthreadsafe())
		return RL_SYSTEM_ERROR;

	c = calloc(1, sizeof(RlClient));
	if (c == NULL)
		return RL_NO_MEMORY;
	c->conninfo = strdup(options->conninfo ? options->conninfo : "");
	c->query = rl_build_query(options->schema, RL_DECISION_COLUMNS
							  "@rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)");
	c->query_policy = rl_build_query(options->schema, RL_DECISION_COLUMNS
									 "@rl_take($1::text, $2::text, $3::int4)");
	c->query_all = rl_build_query(options->schema, RL_ALL_COLUMNS
								  "@rl_take_all_detail($1::text[], $2::text[], $3::float8[], $4::int4[], $5::int4[]) AS a");
	c->query_all_policy = rl_build_query(options->schema, RL_ALL_COLUMNS
										 "@rl_take_all_detail($1::text[], $2::text[], $3::int4[]) AS a");
	c->query_refund = rl_build_query(options->schema,
									 "SELECT @rl_refund($1::text, $2::text, $3::int4)");
	c->query_policies = rl_build_query(options->schema,
									   "SELECT limiter, rate, burst, shadow, "
									   RL_INTERVAL_US("lockout") ", lockout_growth, "
									   RL_INTERVAL_US("lockout_max") " FROM @rl_policies");
	c->query_policies_12 = rl_build_query(options->schema,
										  "SELECT limiter, rate, burst, shadow FROM @rl_policies");
	c->pool = calloc(options->pool_size, sizeof(RlConnection));
	c->partitions = options->partitions > 0 ? options->partitions : 1;
	c->health = calloc(c->partitions, sizeof(RlHealth));
	if (!rl_table_init(&c->table, options->max_keys) ||
		!rl_table_init(&c->warned, RL_MAX_WARNED_LIMITERS) ||
		c->conninfo == NULL || c->query == NULL || c->query_policy == NULL ||
		c->query_all == NULL || c->query_all_policy == NULL ||
		c->query_refund == NULL || c->query_policies == NULL || c->query_policies_12 == NULL || c->pool == NULL || c->health == NULL)
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
	c->policy_refresh_us = (int64_t) options->policy_refresh_ms * 1000;
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
