/*
 * store.c
 *		Where buckets live: the one entry point of every function that
 *		decides, forgets or cleans, whichever store ratelimit.store chose.
 *
 * The checks that depend on the store are made here: a table decision writes
 * a row, so it is refused in a read-only transaction and watched inside
 * transaction blocks (ratelimit.in_transaction); a memory decision is not
 * transactional, and goes to the table only when memory is full.  A durable
 * limiter's buckets live in rl_buckets_durable in both stores, and follow
 * the table's rules.  Both are refused on a hot standby: a standby's buckets
 * would answer differently from its primary's.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"

#include "ratelimit.h"

/*
 * Inside BEGIN ... COMMIT the decision rolls back with the transaction and
 * the row lock lasts until its end: ratelimit.in_transaction says whether
 * that is fine, worth a warning once per session, or an error.  Like
 * PreventInTransactionBlock, this counts the implicit block of a query string
 * with several statements, where the same holds.  A subtransaction (a
 * PL/pgSQL exception block, a savepoint) is the same trap even in autocommit:
 * the error it catches rolls the decision back.  A peek (cost 0) neither
 * writes nor locks, so it is never in the trap.
 */
static void
check_transaction_block(const char *function, int32 cost)
{
	static bool warned = false;
	bool		in_block;

	if (ratelimit_in_transaction == IN_TRANSACTION_ALLOW || cost == 0)
		return;
	/* a savepoint inside BEGIN ... COMMIT is named as the subtransaction */
	in_block = !IsSubTransaction();
	if (in_block && !IsTransactionBlock())
		return;
	if (ratelimit_in_transaction == IN_TRANSACTION_ERROR)
	{
		if (in_block)
			ereport(ERROR,
					(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
					 errmsg("%s cannot run inside a transaction block", function),
					 errdetail("Its decision would roll back with the transaction, and its row lock would last until commit."),
					 errhint("Call it in its own statement outside BEGIN ... COMMIT, or set ratelimit.in_transaction to \"warn\" or \"allow\".")));
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s cannot run inside a subtransaction", function),
				 errdetail("Its decision would roll back when the exception block around it catches an error or its savepoint is rolled back."),
				 errhint("Call it outside exception blocks and savepoints, or set ratelimit.in_transaction to \"warn\" or \"allow\".")));
	}
	if (warned)
		return;
	warned = true;
	if (in_block)
		ereport(WARNING,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s ran inside a transaction block", function),
				 errdetail("Its decision rolls back with the transaction, and its row lock lasts until commit."),
				 errhint("Call it in its own statement outside BEGIN ... COMMIT, or set ratelimit.in_transaction to \"allow\" to silence this warning.")));
	else
		ereport(WARNING,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s ran inside a subtransaction", function),
				 errdetail("Its decision rolls back when the exception block around it catches an error or its savepoint is rolled back."),
				 errhint("Call it outside exception blocks and savepoints, or set ratelimit.in_transaction to \"allow\" to silence this warning.")));
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
store_take(Oid fn_oid, const char *function, BucketTable table, bytea *key,
		   const GcraLimit *limit, int64 at, int32 cost)
{
	GcraDecision d;

	bucket_store_refuse_recovery(function);
	if (memory_store_in_use() && table == BUCKETS_UNLOGGED)
	{
		bucket_store_connect(fn_oid);
		d = memory_store_take(function, key, limit, at, cost);
		bucket_store_disconnect();
		return d;
	}
	store_check_writable(function, cost);
	bucket_store_connect(fn_oid);
	(void) bucket_store_take(table, key, limit, at, cost, true, &d);
	bucket_store_disconnect();
	return d;
}

/*
 * Decide n requests all or nothing (gcra_decide_all) at one time; decisions[i]
 * is what was decided and stored for requests[i].  The memory store decides
 * in memory the keys it keeps there, and the others in their tables.
 */
void
store_take_all(Oid fn_oid, const char *function, const StoreRequest *requests,
			   int n, int64 at, GcraDecision *decisions)
{
	int32		cost = 0;
	int			i;

	for (i = 0; i < n; i++)
		cost = Max(cost, requests[i].cost);
	bucket_store_refuse_recovery(function);
	if (memory_store_in_use())
	{
		bucket_store_connect(fn_oid);
		memory_store_take_all(function, requests, n, at, decisions);
		bucket_store_disconnect();
		return;
	}
	store_check_writable(function, cost);
	bucket_store_connect(fn_oid);
	bucket_store_take_all(requests, n, at, decisions);
	bucket_store_disconnect();
}

/*
 * Give cost cells back to a live bucket, where the limiter's buckets live
 * now; true when that changed it.
 */
bool
store_refund(Oid fn_oid, const char *function, BucketTable table, bytea *key,
			 int64 now, int32 cost)
{
	bool		changed;

	bucket_store_refuse_recovery(function);
	if (memory_store_in_use() && table == BUCKETS_UNLOGGED)
	{
		bucket_store_connect(fn_oid);
		changed = memory_store_refund(function, key, now, cost);
		bucket_store_disconnect();
		return changed;
	}
	store_check_writable(function, cost);
	bucket_store_connect(fn_oid);
	changed = bucket_store_refund(table, key, now, cost);
	bucket_store_disconnect();
	return changed;
}

bool
store_delete(Oid fn_oid, const char *function, bytea *key)
{
	bool		removed;

	bucket_store_refuse_recovery(function);
	bucket_store_connect(fn_oid);
	/* everywhere: a limiter whose durable changed has left buckets behind */
	removed = memory_store_in_use() && memory_store_delete(key);
	removed |= bucket_store_delete(key);
	bucket_store_disconnect();
	return removed;
}

/*
 * Delete every bucket that has passed at now, in both tables and in memory;
 * answers how many.
 */
int64
store_cleanup(Oid fn_oid, const char *function, TimestampTz now)
{
	int64		deleted = 0;
	int			t;

	bucket_store_refuse_recovery(function);
	bucket_store_connect(fn_oid);
	for (t = 0; t < NUM_BUCKET_TABLES; t++)
	{
		ItemPointerData start;

		/* (0,0) comes before every row */
		ItemPointerSet(&start, 0, 0);
		deleted += bucket_store_delete_expired(t, now, 0, &start);
	}
	if (memory_store_in_use())
		deleted += memory_store_cleanup(now);
	bucket_store_disconnect();
	return deleted;
}

/*
 * rl_store_status(): the store in use, the memory store's slots in all and
 * holding a live bucket (NULL with the table store), and the buckets in this
 * database's tables, rl_buckets and rl_buckets_durable.
 */
PG_FUNCTION_INFO_V1(rl_store_status);

Datum
rl_store_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	bool		memory = memory_store_in_use();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	values[0] = CStringGetTextDatum(memory ? "memory" : "table");
	if (memory)
	{
		int64		total;
		int64		live;

		memory_store_usage(GetCurrentTimestamp(), &total, &live);
		values[1] = Int64GetDatum(total);
		values[2] = Int64GetDatum(live);
	}
	else
		nulls[1] = nulls[2] = true;

	bucket_store_refuse_recovery("rl_store_status");
	bucket_store_connect(fcinfo->flinfo->fn_oid);
	values[3] = Int64GetDatum(bucket_store_count());
	bucket_store_disconnect();

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

/*
 * rl_inspect(limiter, key): where the bucket of a key lives and what it
 * holds, as stored (its tat may have passed); all NULL when it has none,
 * and its lock (1.3's columns) NULL when it was never locked.  A durable
 * limiter's bucket is read where it decides, in rl_buckets_durable.
 */
PG_FUNCTION_INFO_V1(rl_inspect);

Datum
rl_inspect(PG_FUNCTION_ARGS)
{
	text	   *limiter = required_text_argument(fcinfo, 0, "limiter");
	text	   *key = required_text_argument(fcinfo, 1, "key");
	bytea	   *stored = bucket_key(limiter, key);
	BucketTable table = limiter_table(fcinfo->flinfo->fn_oid, limiter);
	GcraBucket	bucket = {0};
	const char *where = table == BUCKETS_DURABLE ? "durable" : "table";
	TupleDesc	desc;
	Datum		values[5];
	bool		nulls[5];

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	bucket_store_refuse_recovery("rl_inspect");
	bucket_store_connect(fcinfo->flinfo->fn_oid);
	if (table == BUCKETS_UNLOGGED && memory_store_in_use() &&
		memory_store_read(stored, &bucket))
		where = "memory";
	else
		bucket_store_read(table, stored, &bucket);
	bucket_store_disconnect();

	values[0] = CStringGetTextDatum(where);
	values[1] = TimestampTzGetDatum(bucket.tat_us);
	values[2] = Int64GetDatum(bucket.interval_us);
	values[3] = TimestampTzGetDatum(bucket.lock_until_us);
	values[4] = Int64GetDatum(bucket.lock_us);
	nulls[0] = nulls[1] = nulls[2] = !bucket.present;
	nulls[3] = nulls[4] = !bucket.present ||
		(bucket.lock_until_us == 0 && bucket.lock_us == 0);
	/* a database still at 1.0 to 1.2 has the first three columns */
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}
