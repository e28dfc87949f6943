/*
 * cleanup.c
 *		rl_cleanup(): delete the buckets whose tat has passed.
 *
 * A bucket whose tat has passed decides exactly like an absent one, so
 * deleting it changes no decision; it only keeps the table small.
 */
#include "postgres.h"

#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_cleanup);

Datum
rl_cleanup(PG_FUNCTION_ARGS)
{
	ItemPointerData start;
	int64		deleted;

	/* (0,0) comes before every row */
	ItemPointerSet(&start, 0, 0);
	bucket_store_refuse_recovery("rl_cleanup");
	bucket_store_connect(fcinfo->flinfo->fn_oid);
	deleted = bucket_store_delete_expired(GetCurrentTimestamp(), 0, &start);
	bucket_store_disconnect();
	PG_RETURN_INT64(deleted);
}
