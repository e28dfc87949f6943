/*
 * store.c
 *		Where buckets live: the one entry point of every function that
 *		decides, forgets or cleans, whichever store ratelimit.store chose.
 *
 * The checks that depend on the store are made here: a table decision writes
 * a row, so it is refused on a hot standby and in a read-only transaction
 * and watched inside transaction blocks (ratelimit.in_transaction).
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "tcop/utility.h"

#include "ratelimit.h"

/*
 * Inside BEGIN ... COMMIT the decision rolls back with the transaction and
 * the row lock lasts until its end: ratelimit.in_transaction says whether
 * that is fine, worth a warning once per session, or an error.  Like
 * PreventInTransactionBlock, this counts the implicit block of a query string
 * with several statements, where the same holds.  A peek (cost 0) neither
 * writes nor locks, so it is never in the trap.
 */
static void
check_transaction_block(const char *function, int32 cost)
{
	static bool warned = false;

	if (ratelimit_in_transaction == IN_TRANSACTION_ALLOW || cost == 0 ||
		!IsTransactionBlock())
		return;
	if (ratelimit_in_transaction == IN_TRANSACTION_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s cannot run inside a transaction block", function),
				 errdetail("Its decision would roll back with the transaction, and its row lock would last until commit."),
				 errhint("Call it in its own statement outside BEGIN ... COMMIT, or set ratelimit.in_transaction to \"warn\" or \"allow\".")));
	if (!warned)
	{
		warned = true;
		ereport(WARNING,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s ran inside a transaction block", function),
				 errdetail("Its decision rolls back with the transaction, and its row lock lasts until commit."),
				 errhint("Call it in its own statement outside BEGIN ... COMMIT, or set ratelimit.in_transaction to \"allow\" to silence this warning.")));
	}
}

/*
 * A table decision of cost may have to write rl_buckets: refuse what cannot
 * or should not write, before anything is read.
 */
void
store_check_writable(const char *function, int32 cost)
{
	check_transaction_block(function, cost);
	if (cost > 0)
		PreventCommandIfReadOnly(function);
}

GcraDecision
store_take(Oid fn_oid, const char *function, bytea *key,
		   const GcraLimit *limit, int64 now, int32 cost)
{
	GcraDecision d;

	bucket_store_refuse_recovery(function);
	store_check_writable(function, cost);
	bucket_store_connect(fn_oid);
	d = bucket_store_take(key, limit, now, cost);
	bucket_store_disconnect();
	return d;
}

/*
 * Decide n requests all or nothing (gcra_decide_all); decisions[i] is what
 * was decided and stored for requests[i].
 */
void
store_take_all(Oid fn_oid, const char *function, const StoreRequest *requests,
			   int n, int64 now, GcraDecision *decisions)
{
	int32		cost = 0;
	int			i;

	for (i = 0; i < n; i++)
		cost = Max(cost, requests[i].cost);
	bucket_store_refuse_recovery(function);
	store_check_writable(function, cost);
	bucket_store_connect(fn_oid);
	bucket_store_take_all(requests, n, now, decisions);
	bucket_store_disconnect();
}

/* Give cost cells back to a live bucket; true when that changed it. */
bool
store_refund(Oid fn_oid, const char *function, bytea *key, int64 now,
			 int32 cost)
{
	bool		changed;

	bucket_store_refuse_recovery(function);
	store_check_writable(function, cost);
	bucket_store_connect(fn_oid);
	changed = bucket_store_refund(key, now, cost);
	bucket_store_disconnect();
	return changed;
}

bool
store_delete(Oid fn_oid, const char *function, bytea *key)
{
	bool		removed;

	bucket_store_refuse_recovery(function);
	bucket_store_connect(fn_oid);
	removed = bucket_store_delete(key);
	bucket_store_disconnect();
	return removed;
}

/* Delete every bucket whose tat is before now; answers how many. */
int64
store_cleanup(Oid fn_oid, const char *function, TimestampTz now)
{
	ItemPointerData start;
	int64		deleted;

	/* (0,0) comes before every row */
	ItemPointerSet(&start, 0, 0);
	bucket_store_refuse_recovery(function);
	bucket_store_connect(fn_oid);
	deleted = bucket_store_delete_expired(now, 0, &start);
	bucket_store_disconnect();
	return deleted;
}
