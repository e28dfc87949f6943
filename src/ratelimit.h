/*
 * ratelimit.h
 *		Declarations shared by the C files of the ratelimit extension.
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include "postgres.h"

#include "fmgr.h"
#include "access/tupdesc.h"
#include "nodes/pg_list.h"
#include "storage/itemptr.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "gcra.h"

/* Length of a stored bucket key: a SHA-256 or HMAC-SHA-256 digest. */
#define BUCKET_KEY_LEN 32

/* ratelimit.in_transaction */
typedef enum InTransactionAction
{
	IN_TRANSACTION_ALLOW,
	IN_TRANSACTION_WARN,
	IN_TRANSACTION_ERROR
} InTransactionAction;

/* ratelimit.store */
typedef enum RatelimitStore
{
	STORE_TABLE,
	STORE_MEMORY
} RatelimitStore;

/*
 * The tables buckets live in: rl_buckets (UNLOGGED, the table store's and
 * where the memory store spills) and rl_buckets_durable (1.3: logged, for
 * policies with durable = true, in both stores).
 */
typedef enum BucketTable
{
	BUCKETS_UNLOGGED,
	BUCKETS_DURABLE,
	NUM_BUCKET_TABLES
} BucketTable;

/* settings (ratelimit.c, memory_store.c) */
extern int	ratelimit_store;
extern int	ratelimit_memory_buckets;
extern char *ratelimit_key_secret;
extern char *ratelimit_key_secret_file;
extern int	ratelimit_in_transaction;
extern int	ratelimit_cleanup_interval;
extern int	ratelimit_cleanup_batch_size;

/* take.c: what every deciding function shares */
typedef enum ResultType
{
	RESULT_DECISION,			/* rl_decision */
	RESULT_DECISION_ALL,		/* rl_decision_all */
	RESULT_DECISION_DETAIL,		/* rl_decision_detail */
	RESULT_REQUEST,				/* rl_decision, an element of its requests */
	NUM_RESULT_TYPES
} ResultType;

extern TupleDesc get_result_desc(FunctionCallInfo fcinfo, ResultType type);
extern void require_argument(FunctionCallInfo fcinfo, int argno, const char *name);
extern text *required_text_argument(FunctionCallInfo fcinfo, int argno,
									const char *name);
extern int64 required_time_argument(FunctionCallInfo fcinfo, int argno,
									const char *name);
extern void refuse_limit(GcraError error, double rate, int32 burst, int32 cost);
extern void refuse_dropped_table(const char *name);
extern double seconds(int64 us);
extern Datum decision_datum(FunctionCallInfo fcinfo, const GcraDecision *d,
							bool shadow);
extern Datum decision_datum_as(TupleDesc desc, const GcraDecision *d,
							   bool shadow);

/* policy.c: rl_policies, cached per backend */
typedef struct Policy
{
	double		rate;
	int32		burst;
	bool		shadow;
	int64		lockout_us;		/* 0: none (a 1.2 table has none) */
	double		lockout_growth;
	int64		lockout_max_us; /* 0: as lockout_us */
	bool		durable;
} Policy;

/* where the buckets of a limiter with policy (or none: NULL) live */
static inline BucketTable
policy_table(const Policy *policy)
{
	return policy != NULL && policy->durable ? BUCKETS_DURABLE : BUCKETS_UNLOGGED;
}

extern Policy policy_lookup(Oid fn_oid, text *limiter);
extern BucketTable limiter_table(Oid fn_oid, text *limiter);
extern void policy_refuse_explicit(Oid fn_oid, text *limiter,
								   const char *function,
								   const char *policy_form);
extern void policy_limit(const Policy *policy, int64 now, int32 cost,
						 GcraLimit *limit);
extern GcraDecision policy_take(Oid fn_oid, const char *function,
								text *limiter, text *key, int32 cost,
								int64 at, Policy *policy);

/* client_ip.c */
extern void client_ip_define_settings(void);

/* key_secret.c: ratelimit.key_secret_file's hooks, and the HMAC key */
extern bool key_secret_file_check(char **newval, void **extra, GucSource source);
extern void key_secret_file_assign(const char *newval, void *extra);
extern void key_secret_file_refused_at_load(void);
extern void key_secret_assign(const char *newval, void *extra);
extern uint64 key_secret_generation(void);
extern const uint8 *key_secret(size_t *len);

/* bucket_key.c */
extern bytea *bucket_key(text *limiter, text *key);

/*
 * The time a decision is made at: a given one (rl_take_at), or DECIDE_NOW,
 * the server clock read once the call holds its key (its row lock or its
 * memory set), so that the decisions on a key are ordered by their clocks.
 * An explicit time is finite, so it is never DECIDE_NOW.
 */
#define DECIDE_NOW DT_NOBEGIN

static inline int64
decision_time(int64 at)
{
	return at == DECIDE_NOW ? GetCurrentTimestamp() : at;
}

/*
 * One request of a decision over several buckets (rl_take_all): the stored
 * key and the table it lives in, the limit and cost, and whether the limit
 * is only observed (shadow).
 */
typedef struct StoreRequest
{
	bytea	   *key;
	BucketTable table;
	GcraLimit	limit;
	int32		cost;
	bool		shadow;
} StoreRequest;

/*
 * store.c: every function that reads or writes buckets goes through these,
 * whichever store ratelimit.store chose.  fn_oid is the calling SQL
 * function's: the extension's objects live where it does.
 */
extern GcraDecision store_take(Oid fn_oid, const char *function,
							   BucketTable table, bytea *key,
							   const GcraLimit *limit, int64 at, int32 cost);
extern void store_take_all(Oid fn_oid, const char *function,
						   const StoreRequest *requests, int n, int64 at,
						   GcraDecision *decisions);
extern bool store_refund(Oid fn_oid, const char *function, BucketTable table,
						 bytea *key, int64 now, int32 cost);
extern bool store_delete(Oid fn_oid, const char *function, bytea *key);
extern int64 store_cleanup(Oid fn_oid, const char *function, TimestampTz now);
extern void store_check_writable(const char *function, int32 cost);

/* bucket_store.c: the bucket tables */
extern void bucket_store_connect(Oid fn_oid);
extern void bucket_store_connect_to(Oid namespace, Oid owner);
extern void bucket_store_disconnect(void);
extern bool bucket_store_take(BucketTable table, bytea *key,
							  const GcraLimit *limit, int64 at, int32 cost,
							  bool may_insert, GcraDecision *decision);
extern void bucket_store_read(BucketTable table, bytea *key, GcraBucket *bucket);
extern bool bucket_store_probe(bytea *key, TransactionId *inserting);
extern bool bucket_store_insert(bytea *key, const GcraBucket *bucket);
extern Oid	bucket_store_relid(void);
extern int64 bucket_store_count(void);
extern void bucket_store_key_order(const StoreRequest *requests, int n,
								   int *order);
extern void bucket_store_take_all(const StoreRequest *requests, int n,
								  int64 at, GcraDecision *decisions);

/* one row of a bucket table, locked for a decision the caller makes */
typedef struct BucketAccess BucketAccess;
extern BucketAccess *bucket_store_lock_row(bytea *key, GcraBucket *bucket);
extern BucketAccess *bucket_store_hold_row(BucketTable table, bytea *key,
										   const GcraLimit *limit, int64 now,
										   GcraBucket *bucket);
extern void bucket_store_write_row(BucketAccess *row, const GcraDecision *d,
								   const GcraLimit *limit);
extern void bucket_store_close_row(BucketAccess *row);
extern bool bucket_store_refund(BucketTable table, bytea *key, int64 now,
								int32 cost);
extern bool bucket_store_delete(bytea *key);
extern int64 bucket_store_delete_expired(BucketTable table, TimestampTz now,
										 int64 batch_size, ItemPointer position);
extern void bucket_store_refuse_recovery(const char *function);

/* memory_store.c */
extern void memory_store_define_settings(void);
extern void memory_store_register(void);
extern bool memory_store_in_use(void);
extern GcraDecision memory_store_take(const char *function, bytea *key,
									  const GcraLimit *limit, int64 at,
									  int32 cost);
extern void memory_store_take_all(const char *function,
								  const StoreRequest *requests, int n,
								  int64 at, GcraDecision *decisions);
extern bool memory_store_refund(const char *function, bytea *key, int64 now,
								int32 cost);
extern bool memory_store_read(bytea *key, GcraBucket *bucket);
extern bool memory_store_delete(bytea *key);
extern int64 memory_store_cleanup(int64 now);
extern int	memory_store_cleanup_round(int64 now, const Oid *databases,
									   int ndatabases, int64 *freed,
									   Oid *unknown, int max_unknown);
extern void memory_store_forget_databases(const Oid *databases, int ndatabases);
extern void memory_store_usage(int64 now, int64 *total, int64 *live);

/* stats.c */
extern int	ratelimit_stats_limiters;
extern bool ratelimit_stats;
extern void stats_define_settings(void);
extern void stats_register(void);
extern void stats_count(text *limiter, const GcraDecision *d, bool shadow);
extern void stats_count_all(const Datum *limiters, const StoreRequest *requests,
							const GcraDecision *decisions, int n);
extern void stats_record_cleanup(TimestampTz started, int64 deleted);

/* cleanup_worker.c */
extern void cleanup_worker_register(void);

#endif							/* RATELIMIT_H */
