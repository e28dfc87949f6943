/*
 * ratelimit.h
 *		Declarations shared by the C files of the ratelimit extension.
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include "postgres.h"

#include "fmgr.h"
#include "access/tupdesc.h"
#include "storage/itemptr.h"
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

/* settings (ratelimit.c) */
extern char *ratelimit_key_secret;
extern int	ratelimit_in_transaction;
extern int	ratelimit_cleanup_interval;
extern int	ratelimit_cleanup_batch_size;

/* take.c: what every deciding function shares */
typedef enum ResultType
{
	RESULT_DECISION,			/* rl_decision */
	RESULT_DECISION_ALL,		/* rl_decision_all */
	NUM_RESULT_TYPES
} ResultType;

extern TupleDesc get_result_desc(FunctionCallInfo fcinfo, ResultType type);
extern void require_argument(FunctionCallInfo fcinfo, int argno, const char *name);
extern text *required_text_argument(FunctionCallInfo fcinfo, int argno,
									const char *name);
extern void refuse_limit(GcraError error, double rate, int32 burst, int32 cost);
extern double seconds(int64 us);
extern Datum decision_datum(FunctionCallInfo fcinfo, const GcraDecision *d,
							bool shadow);

/* policy.c: rl_policies, cached per backend */
typedef struct Policy
{
	double		rate;
	int32		burst;
	bool		shadow;
} Policy;

extern Policy policy_lookup(Oid fn_oid, text *limiter);

/* client_ip.c */
extern void client_ip_define_settings(void);

/* bucket_key.c */
extern bytea *bucket_key(text *limiter, text *key);

/*
 * One request of a decision over several buckets (rl_take_all): the stored
 * key, the limit and cost, and whether the limit is only observed (shadow).
 */
typedef struct StoreRequest
{
	bytea	   *key;
	GcraLimit	limit;
	int32		cost;
	bool		shadow;
} StoreRequest;

/*
 * store.c: every function that reads or writes buckets goes through these,
 * whichever store ratelimit.store chose.  fn_oid is the calling SQL
 * function's: the extension's objects live where it does.
 */
extern GcraDecision store_take(Oid fn_oid, const char *function, bytea *key,
							   const GcraLimit *limit, int64 now, int32 cost);
extern void store_take_all(Oid fn_oid, const char *function,
						   const StoreRequest *requests, int n, int64 now,
						   GcraDecision *decisions);
extern bool store_refund(Oid fn_oid, const char *function, bytea *key,
						 int64 now, int32 cost);
extern bool store_delete(Oid fn_oid, const char *function, bytea *key);
extern int64 store_cleanup(Oid fn_oid, const char *function, TimestampTz now);
extern void store_check_writable(const char *function, int32 cost);

/* bucket_store.c: the table store, rl_buckets */
extern void bucket_store_connect(Oid fn_oid);
extern void bucket_store_connect_to(Oid namespace, Oid owner);
extern void bucket_store_disconnect(void);
extern GcraDecision bucket_store_take(bytea *key, const GcraLimit *limit,
									  int64 now, int32 cost);
extern void bucket_store_take_all(const StoreRequest *requests, int n,
								  int64 now, GcraDecision *decisions);
extern bool bucket_store_refund(bytea *key, int64 now, int32 cost);
extern bool bucket_store_delete(bytea *key);
extern int64 bucket_store_delete_expired(TimestampTz now, int64 batch_size,
										 ItemPointer position);
extern void bucket_store_refuse_recovery(const char *function);

/* cleanup_worker.c */
extern void cleanup_worker_register(void);

#endif							/* RATELIMIT_H */
