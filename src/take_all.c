/*
 * take_all.c
 *		rl_take_all: several limits in one decision, all or nothing, by
 *		policies or with explicit rates and bursts; rl_take_all_detail: the
 *		same call, answering also each request's own decision.
 *
 * Every argument is checked before anything is read or written; the store
 * decides (gcra_decide_all) and the combined answer is rl_decision_all.
 * rl_decision_detail adds requests, each request as rl_take would answer it
 * in this call (its bucket after the call: unspent when the call is denied),
 * so that a client keeps every bucket's state without a second query.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_take_all);
PG_FUNCTION_INFO_V1(rl_take_all_policy);
PG_FUNCTION_INFO_V1(rl_take_all_detail);
PG_FUNCTION_INFO_V1(rl_take_all_detail_policy);

#define ARG_LIMITERS 0
#define ARG_KEYS 1

/* The elements of one array argument. */
typedef struct ArrayArgument
{
	const char *name;
	Datum	   *values;
	int			n;
} ArrayArgument;

/*
 * Deconstruct the array argument argno: present, one dimension (or empty),
 * no NULL element, no empty text, and as many elements as want (-1: 1 to
 * GCRA_MAX_REQUESTS).
 */
static ArrayArgument
array_argument(FunctionCallInfo fcinfo, int argno, const char *name,
			   Oid element_type, int want)
{
	ArrayArgument arg = {name, NULL, 0};
	ArrayType  *array;
	bool	   *nulls;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			i;

	require_argument(fcinfo, argno, name);
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", name)));
	get_typlenbyvalalign(element_type, &typlen, &typbyval, &typalign);
	deconstruct_array(array, element_type, typlen, typbyval, typalign,
					  &arg.values, &nulls, &arg.n);
	if (want < 0 && (arg.n < 1 || arg.n > GCRA_MAX_REQUESTS))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must have 1 to %d elements", name, GCRA_MAX_REQUESTS),
				 errdetail("It has %d.", arg.n)));
	if (want >= 0 && arg.n != want)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must have as many elements as limiters", name),
				 errdetail("limiters has %d, %s has %d.", want, name, arg.n)));
	for (i = 0; i < arg.n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain NULL", name),
					 errdetail("%s[%d] is NULL.", name, i + 1)));
		if (element_type == TEXTOID &&
			VARSIZE_ANY_EXHDR(DatumGetTextPP(arg.values[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain an empty string", name),
					 errdetail("%s[%d] is empty.", name, i + 1)));
	}
	return arg;
}

/* Which element of which function's arrays an error is about. */
typedef struct ElementContext
{
	const char *function;
	int			element;
} ElementContext;

static void
element_context(void *arg)
{
	ElementContext *at = arg;

	errcontext("element %d of the arrays of %s", at->element + 1, at->function);
}

/* Each request's own decision, as an array of rl_decision in their order. */
static Datum
requests_datum(FunctionCallInfo fcinfo, const GcraDecision *decisions,
			   const bool *shadow, int n)
{
	TupleDesc	desc = get_result_desc(fcinfo, RESULT_REQUEST);
	Datum		elements[GCRA_MAX_REQUESTS];
	int			i;

	for (i = 0; i < n; i++)
		elements[i] = decision_datum_as(desc, &decisions[i], shadow[i]);
	return PointerGetDatum(construct_array(elements, n, desc->tdtypeid,
										   -1, false, TYPALIGN_DOUBLE));
}

/*
 * The body of the four forms.  by_policy: rates and bursts come from
 * rl_policies; otherwise from the arguments rates (2) and bursts (3).
 * detail: the answer is rl_decision_detail.
 */
static Datum
take_all(FunctionCallInfo fcinfo, bool by_policy, bool detail)
{
	const char *function = detail ? "rl_take_all_detail" : "rl_take_all";
	ArrayArgument limiters = array_argument(fcinfo, ARG_LIMITERS, "limiters", TEXTOID, -1);
	int			n = limiters.n;
	ArrayArgument keys = array_argument(fcinfo, ARG_KEYS, "keys", TEXTOID, n);
	ArrayArgument rates = {0};
	ArrayArgument bursts = {0};
	ArrayArgument costs = {0};
	int			arg_costs = by_policy ? 2 : 4;
	TimestampTz now = GetCurrentTimestamp();
	StoreRequest requests[GCRA_MAX_REQUESTS];
	GcraDecision decisions[GCRA_MAX_REQUESTS];
	bool		shadow[GCRA_MAX_REQUESTS];
	GcraCombined c;
	ErrorContextCallback context;
	ElementContext at = {function, 0};
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	int			i,
				j;

	if (!by_policy)
	{
		rates = array_argument(fcinfo, 2, "rates", FLOAT8OID, n);
		bursts = array_argument(fcinfo, 3, "bursts", INT4OID, n);
	}
	if (!PG_ARGISNULL(arg_costs))
		costs = array_argument(fcinfo, arg_costs, "costs", INT4OID, n);

	context.callback = element_context;
	context.arg = &at;
	context.previous = error_context_stack;
	error_context_stack = &context;
	for (at.element = 0; at.element < n; at.element++)
	{
		StoreRequest *r = &requests[at.element];
		text	   *limiter = DatumGetTextPP(limiters.values[at.element]);
		r->cost = costs.values != NULL ? DatumGetInt32(costs.values[at.element]) : 1;
		if (by_policy)
		{
			Policy		policy = policy_lookup(fcinfo->flinfo->fn_oid, limiter);

			policy_limit(&policy, now, r->cost, &r->limit);
			r->shadow = policy.shadow;
			r->table = policy_table(&policy);
		}
		else
		{
			double		rate = DatumGetFloat8(rates.values[at.element]);
			int32		burst = DatumGetInt32(bursts.values[at.element]);
			GcraError	error;

			policy_refuse_explicit(fcinfo->flinfo->fn_oid, limiter, function,
								   detail ? "rl_take_all_detail(limiters, keys, costs)" :
								   "rl_take_all(limiters, keys, costs)");
			error = gcra_limit_init(&r->limit, rate, burst, now, END_TIMESTAMP - 1);
			if (error == GCRA_OK && r->cost < 0)
				error = GCRA_BAD_COST;
			if (error != GCRA_OK)
				refuse_limit(error, rate, burst, r->cost);
			r->shadow = false;
			r->table = BUCKETS_UNLOGGED;
		}
		r->key = bucket_key(limiter, DatumGetTextPP(keys.values[at.element]));
	}
	error_context_stack = context.previous;

	/* the same pair twice has the same stored key */
	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (memcmp(VARDATA(requests[i].key), VARDATA(requests[j].key),
					   BUCKET_KEY_LEN) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("limiters and keys must not name the same pair twice"),
						 errdetail("Elements %d and %d are both (\"%s\", \"%s\").",
								   j + 1, i + 1,
								   TextDatumGetCString(limiters.values[i]),
								   TextDatumGetCString(keys.values[i]))));

	store_take_all(fcinfo->flinfo->fn_oid, function, requests, n,
				   DECIDE_NOW, decisions);
	stats_count_all(limiters.values, requests, decisions, n);
	for (i = 0; i < n; i++)
		shadow[i] = requests[i].shadow;
	c = gcra_combine(decisions, shadow, n);

	values[0] = BoolGetDatum(c.allowed);
	values[1] = Int32GetDatum(c.remaining);
	values[2] = Float8GetDatum(seconds(c.retry_after_us));
	nulls[2] = !c.retry_known;
	values[3] = Float8GetDatum(seconds(c.reset_after_us));
	values[4] = limiters.values[c.binding];
	if (!detail)
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(get_result_desc(fcinfo, RESULT_DECISION_ALL),
														  values, nulls)));
	values[5] = requests_datum(fcinfo, decisions, shadow, n);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(get_result_desc(fcinfo, RESULT_DECISION_DETAIL),
													  values, nulls)));
}

/* rl_take_all(limiters, keys, rates, bursts, costs) */
Datum
rl_take_all(PG_FUNCTION_ARGS)
{
	return take_all(fcinfo, false, false);
}

/* rl_take_all(limiters, keys, costs): by the limiters' policies */
Datum
rl_take_all_policy(PG_FUNCTION_ARGS)
{
	return take_all(fcinfo, true, false);
}

/* rl_take_all_detail(limiters, keys, rates, bursts, costs) */
Datum
rl_take_all_detail(PG_FUNCTION_ARGS)
{
	return take_all(fcinfo, false, true);
}

/* rl_take_all_detail(limiters, keys, costs): by the limiters' policies */
Datum
rl_take_all_detail_policy(PG_FUNCTION_ARGS)
{
	return take_all(fcinfo, true, true);
}
