/*
 * ratelimit.h
 *		Declarations shared by the C files of the ratelimit extension.
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include "postgres.h"

#include "fmgr.h"
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

/* client_ip.c */
extern void client_ip_define_settings(void);

/* bucket_key.c */
extern bytea *bucket_key(text *limiter, text *key);

/* bucket_store.c */
extern void bucket_store_connect(Oid fn_oid);
extern void bucket_store_connect_to(Oid namespace, Oid owner);
extern void bucket_store_disconnect(void);
extern GcraDecision bucket_store_take(bytea *key, const GcraLimit *limit,
									  int64 now, int32 cost);
extern bool bucket_store_delete(bytea *key);
extern int64 bucket_store_delete_expired(TimestampTz now, int64 batch_size,
										 ItemPointer position);
extern void bucket_store_refuse_recovery(const char *function);

/* cleanup_worker.c */
extern void cleanup_worker_register(void);

#endif							/* RATELIMIT_H */
