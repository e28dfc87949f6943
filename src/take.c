/*
 * take.c
 *		The SQL face of a decision: rl_take, rl_take_at, rl_reset and
 *		rl_refund, and the argument checks every deciding function shares.
 *
 * Checks every argument before anything is read or written, then hands the
 * key and limit to store.c and turns the decision into rl_decision.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/float.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_take);
PG_FUNCTION_INFO_V1(rl_take_at);
PG_FUNCTION_INFO_V1(rl_reset);
PG_FUNCTION_INFO_V1(rl_refund);

#define ARG_LIMITER 0
#define ARG_KEY 1
#define ARG_RATE 2
#define ARG_BURST 3
#define ARG_COST 4
#define ARG_AT 5

/*
 * Blessed descriptors of the result types, made again after any change to
 * pg_proc (a new extension has new types).  The callback only marks them
 * stale: a caller may hold a pointer when invalidations are processed, so the
 * old copies are freed at the next get, before anyone can hold them again.
 */
static TupleDesc result_descs[NUM_RESULT_TYPES];
static bool result_descs_stale = false;

static void
forget_result_descs(Datum arg, int cacheid, uint32 hashvalue)
{
	result_descs_stale = true;
}

/*
 * The descriptor of fcinfo's result type, which is the given one; for
 * RESULT_REQUEST, of the elements of its last column (the requests of
 * rl_decision_detail, whose type is in the same schema).
 */
TupleDesc
get_result_desc(FunctionCallInfo fcinfo, ResultType type)
{
	static bool callback_registered = false;

	if (result_descs_stale)
	{
		int			i;

		for (i = 0; i < NUM_RESULT_TYPES; i++)
			if (result_descs[i] != NULL)
			{
				FreeTupleDesc(result_descs[i]);
				result_descs[i] = NULL;
			}
		result_descs_stale = false;
	}
	if (result_descs[type] == NULL)
	{
		TupleDesc	desc;
		MemoryContext old;

		if (!callback_registered)
		{
			CacheRegisterSyscacheCallback(PROCOID, forget_result_descs, (Datum) 0);
			callback_registered = true;
		}
		if (type == RESULT_REQUEST)
		{
			TupleDesc	detail = get_result_desc(fcinfo, RESULT_DECISION_DETAIL);
			Oid			element = get_element_type(TupleDescAttr(detail, detail->natts - 1)->atttypid);

			desc = lookup_rowtype_tupdesc(element, -1);
		}
		else if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		old = MemoryContextSwitchTo(CacheMemoryContext);
		result_descs[type] = BlessTupleDesc(CreateTupleDescCopy(desc));
		MemoryContextSwitchTo(old);
		if (type == RESULT_REQUEST)
			ReleaseTupleDesc(desc);
	}
	return result_descs[type];
}

void
require_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/* limiter and key: present and non-empty */
text *
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

void
refuse_limit(GcraError error, double rate, int32 burst, int32 cost)
{
	/* a rate of 0 is mostly 5/60 in SQL: an integer division */
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s", gcra_error_message(error)),
			 error == GCRA_BAD_COST ? errdetail("cost is %d.", cost) :
			 error == GCRA_BAD_BURST ? errdetail("burst is %d.", burst) :
			 error == GCRA_BAD_LOCKOUT ? errdetail("The policy's lockout columns are outside their checks.") :
			 errdetail("rate is %s per second, burst is %d.",
					   float8out_internal(rate), burst),
			 error == GCRA_BAD_RATE && rate == 0.0 ?
			 errhint("A rate is in requests per second, and 5/60 divides integers (0): write 5.0/60.") : 0));
}

/*
 * A table of the extension (name) that a concurrent DROP EXTENSION dropped
 * while the call waited for its lock: say so plainly, never by its OID.
 */
void
refuse_dropped_table(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_TABLE),
			 errmsg("table \"%s\" of extension \"ratelimit\" does not exist", name),
			 errdetail("The extension was dropped or changed while the call waited."),
			 errhint("Create the extension again if it is still needed.")));
}

double
seconds(int64 us)
{
	return (double) us / USECS_PER_SEC;
}

/*
 * A decision as rl_decision.  A shadow decision answers allowed, without a
 * retry_after, whatever it decided.
 */
Datum
decision_datum(FunctionCallInfo fcinfo, const GcraDecision *d, bool shadow)
{
	return decision_datum_as(get_result_desc(fcinfo, RESULT_DECISION), d, shadow);
}

/* The same, of the row type desc (rl_decision). */
Datum
decision_datum_as(TupleDesc desc, const GcraDecision *d, bool shadow)
{
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	bool		allowed = d->allowed || shadow;

	values[0] = BoolGetDatum(allowed);
	values[1] = Int32GetDatum(d->remaining);
	values[2] = Float8GetDatum(allowed ? 0.0 : seconds(d->retry_after_us));
	nulls[2] = !allowed && !d->retry_known;
	values[3] = Float8GetDatum(seconds(d->reset_after_us));
	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

/* The body of rl_take and rl_take_at, deciding at time at (DECIDE_NOW). */
static Datum
take(FunctionCallInfo fcinfo, const char *function, TimestampTz at)
{
	text	   *limiter = required_text_argument(fcinfo, ARG_LIMITER, "limiter");
	text	   *key = required_text_argument(fcinfo, ARG_KEY, "key");
	double		rate;
	int32		burst;
	int32		cost;
	GcraLimit	limit;
	GcraError	error;
	GcraDecision d;

	require_argument(fcinfo, ARG_RATE, "rate");
	require_argument(fcinfo, ARG_BURST, "burst");
	require_argument(fcinfo, ARG_COST, "cost");
	rate = PG_GETARG_FLOAT8(ARG_RATE);
	burst = PG_GETARG_INT32(ARG_BURST);
	cost = PG_GETARG_INT32(ARG_COST);
	/* first, as in rl_take_all: a policy's limiter, whatever the limit */
	policy_refuse_explicit(fcinfo->flinfo->fn_oid, limiter, function,
						   "rl_take(limiter, key, cost)");

	error = gcra_limit_init(&limit, rate, burst, decision_time(at),
							END_TIMESTAMP - 1);
	if (error == GCRA_OK && cost < 0)
		error = GCRA_BAD_COST;
	if (error != GCRA_OK)
		refuse_limit(error, rate, burst, cost);

	d = store_take(fcinfo->flinfo->fn_oid, function, BUCKETS_UNLOGGED,
				   bucket_key(limiter, key), &limit, at, cost);
	if (cost > 0)				/* a peek is not a decision: not counted */
		stats_count(limiter, &d, false);

	PG_RETURN_DATUM(decision_datum(fcinfo, &d, false));
}

/* rl_take(limiter, key, rate, burst, cost): decide now, by the server clock */
Datum
rl_take(PG_FUNCTION_ARGS)
{
	/* the clock when the decision is made, not when the transaction began */
	return take(fcinfo, "rl_take", DECIDE_NOW);
}

/* The time argument argno (at): present and finite. */
int64
required_time_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	TimestampTz at;

	require_argument(fcinfo, argno, name);
	at = PG_GETARG_TIMESTAMPTZ(argno);
	if (TIMESTAMP_NOT_FINITE(at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite timestamp", name)));
	return at;
}

/* rl_take_at(limiter, key, rate, burst, cost, at): decide at a given time */
Datum
rl_take_at(PG_FUNCTION_ARGS)
{
	return take(fcinfo, "rl_take_at", required_time_argument(fcinfo, ARG_AT, "at"));
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

/*
 * rl_refund(limiter, key, cost): give cost cells back to a live bucket, at
 * the T it was stored with; true when that changed it.
 */
Datum
rl_refund(PG_FUNCTION_ARGS)
{
	text	   *limiter = required_text_argument(fcinfo, ARG_LIMITER, "limiter");
	text	   *key = required_text_argument(fcinfo, ARG_KEY, "key");
	int32		cost;

	require_argument(fcinfo, 2, "cost");
	cost = PG_GETARG_INT32(2);
	if (cost < 0)
		refuse_limit(GCRA_BAD_COST, 0, 0, cost);
	PG_RETURN_BOOL(store_refund(fcinfo->flinfo->fn_oid, "rl_refund",
								limiter_table(fcinfo->flinfo->fn_oid, limiter),
								bucket_key(limiter, key),
								GetCurrentTimestamp(), cost));
}
