/*
 * take.c
 *		The SQL face of a decision: rl_take, rl_take_at and rl_reset.
 *
 * Checks every argument before anything is read or written, then hands the
 * key and limit to bucket_store.c and turns the decision into rl_decision.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/float.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_take);
PG_FUNCTION_INFO_V1(rl_take_at);
PG_FUNCTION_INFO_V1(rl_reset);

#define ARG_LIMITER 0
#define ARG_KEY 1
#define ARG_RATE 2
#define ARG_BURST 3
#define ARG_COST 4
#define ARG_AT 5

/*
 * Blessed descriptor of rl_decision, made again after any change to pg_proc
 * (a new extension has a new type).  The callback only marks it stale: a
 * caller may hold the pointer when invalidations are processed, so the old
 * copy is freed at the next get, before anyone can hold it again.
 */
static TupleDesc decision_desc = NULL;
static bool decision_desc_stale = false;

static void
forget_decision_desc(Datum arg, int cacheid, uint32 hashvalue)
{
	decision_desc_stale = true;
}

static TupleDesc
get_decision_desc(FunctionCallInfo fcinfo)
{
	static bool callback_registered = false;

	if (decision_desc_stale && decision_desc != NULL)
	{
		FreeTupleDesc(decision_desc);
		decision_desc = NULL;
	}
	decision_desc_stale = false;
	if (decision_desc == NULL)
	{
		TupleDesc	desc;
		MemoryContext old;

		if (!callback_registered)
		{
			CacheRegisterSyscacheCallback(PROCOID, forget_decision_desc, (Datum) 0);
			callback_registered = true;
		}
		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		old = MemoryContextSwitchTo(CacheMemoryContext);
		decision_desc = BlessTupleDesc(CreateTupleDescCopy(desc));
		MemoryContextSwitchTo(old);
	}
	return decision_desc;
}

static void
require_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/* limiter and key: present and non-empty */
static text *
required_text_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	text	   *value;

	require_argument(fcinfo, argno, name);
	value = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(value) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
	return value;
}

static void
refuse_limit(GcraError error, double rate, int32 burst, int32 cost)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s", gcra_error_message(error)),
			 error == GCRA_BAD_COST ? errdetail("cost is %d.", cost) :
			 error == GCRA_BAD_BURST ? errdetail("burst is %d.", burst) :
			 errdetail("rate is %s per second, burst is %d.",
					   float8out_internal(rate), burst)));
}

static double
seconds(int64 us)
{
	return (double) us / USECS_PER_SEC;
}

/* The body of rl_take and rl_take_at, deciding at time now. */
static Datum
take(FunctionCallInfo fcinfo, const char *function, TimestampTz now)
{
	text	   *limiter = required_text_argument(fcinfo, ARG_LIMITER, "limiter");
	text	   *key = required_text_argument(fcinfo, ARG_KEY, "key");
	double		rate;
	int32		burst;
	int32		cost;
	GcraLimit	limit;
	GcraError	error;
	GcraDecision d;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	require_argument(fcinfo, ARG_RATE, "rate");
	require_argument(fcinfo, ARG_BURST, "burst");
	require_argument(fcinfo, ARG_COST, "cost");
	rate = PG_GETARG_FLOAT8(ARG_RATE);
	burst = PG_GETARG_INT32(ARG_BURST);
	cost = PG_GETARG_INT32(ARG_COST);

	error = gcra_limit_init(&limit, rate, burst, now, END_TIMESTAMP - 1);
	if (error == GCRA_OK && cost < 0)
		error = GCRA_BAD_COST;
	if (error != GCRA_OK)
		refuse_limit(error, rate, burst, cost);

	d = store_take(fcinfo->flinfo->fn_oid, function, bucket_key(limiter, key),
				   &limit, now, cost);

	values[0] = BoolGetDatum(d.allowed);
	values[1] = Int32GetDatum(d.remaining);
	values[2] = Float8GetDatum(seconds(d.retry_after_us));
	nulls[2] = !d.retry_known;
	values[3] = Float8GetDatum(seconds(d.reset_after_us));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(get_decision_desc(fcinfo),
													  values, nulls)));
}

/* rl_take(limiter, key, rate, burst, cost): decide now, by the server clock */
Datum
rl_take(PG_FUNCTION_ARGS)
{
	/* the clock when the decision is made, not when the transaction began */
	return take(fcinfo, "rl_take", GetCurrentTimestamp());
}

/* rl_take_at(limiter, key, rate, burst, cost, at): decide at a given time */
Datum
rl_take_at(PG_FUNCTION_ARGS)
{
	TimestampTz at;

	require_argument(fcinfo, ARG_AT, "at");
	at = PG_GETARG_TIMESTAMPTZ(ARG_AT);
	if (TIMESTAMP_NOT_FINITE(at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at must be a finite timestamp")));
	return take(fcinfo, "rl_take_at", at);
}

/* rl_reset(limiter, key): forget the bucket, restoring the full budget */
Datum
rl_reset(PG_FUNCTION_ARGS)
{
	text	   *limiter = required_text_argument(fcinfo, ARG_LIMITER, "limiter");
	text	   *key = required_text_argument(fcinfo, ARG_KEY, "key");

	PG_RETURN_BOOL(store_delete(fcinfo->flinfo->fn_oid, "rl_reset",
								bucket_key(limiter, key)));
}
