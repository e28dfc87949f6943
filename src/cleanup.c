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
	PG_RETURN_INT64(store_cleanup(fcinfo->flinfo->fn_oid, "rl_cleanup",
								  GetCurrentTimestamp()));
}
