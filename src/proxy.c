/*
 * proxy.c
 *		The parts of ratelimit_proxy's cross-shard rl_take_all: each part's
 *		take, with the caller's rights, and the refund of exactly what those
 *		takes spent, which needs the owner's (rl_refund is not the caller's).
 *
 * A part is the pairs of one shard, taken there in one rl_take_all.  What a
 * part took is remembered in this backend, out of any caller's reach: the
 * owner's refund (rl_proxy_refund_taken, SECURITY DEFINER) gives back those
 * takes and nothing else, so no role can refund a bucket that it has not
 * just spent itself.  The memory is forgotten when it is refunded, when the
 * call ends, and at the end of every transaction.
 *
 * A shadow limiter's pair answers allowed whether it spent or not (its
 * would-be denial spends nothing), so the refund gives nothing back to the
 * limiters that are shadow on the part's shard: a cell of a shadow pair that
 * did spend stays spent, rather than anyone being able to give a shadow
 * key cells it never spent.
 *
 * A part's error is the caller's: an element number in it ("element N of
 * the arrays of rl_take_all", which the clients read) is renumbered from
 * the part's arrays to the caller's, and names the caller's function.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_proxy_take_part);
PG_FUNCTION_INFO_V1(rl_proxy_taken);
PG_FUNCTION_INFO_V1(rl_proxy_forget_taken);

/* One part that was allowed: its arguments, for the refund. */
typedef struct TakenPart
{
	ArrayType  *idx;			/* positions in the caller's arrays */
	ArrayType  *limiters;
	ArrayType  *keys;
	ArrayType  *costs;			/* NULL: 1 each */
	bool		by_policy;
} TakenPart;

/* of TakenPart, in taken_context, which forgetting them resets */
static List *taken = NIL;
static MemoryContext taken_context = NULL;

static void
forget_taken(void)
{
	if (taken_context != NULL)
		MemoryContextReset(taken_context);
	taken = NIL;
}

static void
forget_at_transaction_end(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		forget_taken();
}

static char *
array_text(ArrayType *array)
{
	return OidOutputFunctionCall(F_ARRAY_OUT, PointerGetDatum(array));
}

/* The schema of SQL function fn_oid, quoted for a query. */
static const char *
function_schema(Oid fn_oid)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn_oid));
	Oid			namespace;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn_oid);
	namespace = ((Form_pg_proc) GETSTRUCT(tuple))->pronamespace;
	ReleaseSysCache(tuple);
	return quote_identifier(get_namespace_name(namespace));
}

/*
 * The context of a part's error as the caller's: "element N of the arrays of
 * F" (the shard's element N and function F) becomes the caller's element
 * and function.  NULL when context names no element.
 */
static char *
renumbered_context(const char *context, ArrayType *idx, const char *function)
{
	static const char prefix[] = "element ";
	static const char middle[] = " of the arrays of ";
	const char *at;
	char	   *end;
	long		element;
	Datum	   *positions;
	int			n;
	StringInfoData buf;

	if (context == NULL || (at = strstr(context, prefix)) == NULL)
		return NULL;
	element = strtol(at + strlen(prefix), &end, 10);
	if (strncmp(end, middle, strlen(middle)) != 0)
		return NULL;
	deconstruct_array(idx, INT4OID, sizeof(int32), true, TYPALIGN_INT,
					  &positions, NULL, &n);
	if (element < 1 || element > n)
		return NULL;
	end += strlen(middle);
	end += strspn(end, "abcdefghijklmnopqrstuvwxyz_");
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, context, at - context);
	appendStringInfo(&buf, "%s%d%s%s", prefix, DatumGetInt32(positions[element - 1]),
					 middle, function);
	appendStringInfoString(&buf, end);
	return buf.data;
}

/*
 * rl_proxy_take_part(function, first, idx, limiters, keys, rates, bursts,
 * costs): the pairs at positions idx, all on one shard, taken there in one
 * rl_take_all_detail (rates NULL: by policy), with the caller's rights.
 * function: the one the caller called, which an error names.  first: a new
 * call, whose earlier parts are forgotten.  An allowed part is remembered
 * for rl_proxy_refund_taken.
 */
Datum
rl_proxy_take_part(PG_FUNCTION_ARGS)
{
	static bool callback_registered = false;
	const char *schema = function_schema(fcinfo->flinfo->fn_oid);
	bool		by_policy = PG_ARGISNULL(5);
	Oid			types[6] = {INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	FLOAT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID};
	Datum		values[6];
	char		nulls[6];
	char	   *query;
	MemoryContext caller = CurrentMemoryContext;
	HeapTupleHeader result;
	bool		allowed;
	bool		isnull;
	int			i;

	for (i = 0; i < 5; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("rl_proxy_take_part needs function, first, idx, limiters and keys")));
	if (!callback_registered)
	{
		taken_context = AllocSetContextCreate(TopMemoryContext,
											  "ratelimit_proxy taken parts",
											  ALLOCSET_SMALL_SIZES);
		RegisterXactCallback(forget_at_transaction_end, NULL);
		callback_registered = true;
	}
	if (PG_GETARG_BOOL(1))
		forget_taken();

	for (i = 0; i < 6; i++)
	{
		values[i] = PG_ARGISNULL(i + 2) ? (Datum) 0 : PG_GETARG_DATUM(i + 2);
		nulls[i] = PG_ARGISNULL(i + 2) ? 'n' : ' ';
	}
	if (by_policy)
		query = psprintf("SELECT a FROM %1$s.rl_proxy_take_all_detail_first(%1$s.rl_proxy_pick($2, $1),"
						 " %1$s.rl_proxy_pick($3, $1), %1$s.rl_proxy_pick($6, $1)) AS a", schema);
	else
		query = psprintf("SELECT a FROM %1$s.rl_proxy_take_all_detail_first(%1$s.rl_proxy_pick($2, $1),"
						 " %1$s.rl_proxy_pick($3, $1), %1$s.rl_proxy_pick($4, $1),"
						 " %1$s.rl_proxy_pick($5, $1), %1$s.rl_proxy_pick($6, $1)) AS a", schema);

	SPI_connect();
	PG_TRY();
	{
		if (SPI_execute_with_args(query, 6, types, values, nulls, false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "rl_proxy_take_all_detail_first answered no row");
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *context;

		MemoryContextSwitchTo(caller);
		edata = CopyErrorData();
		context = renumbered_context(edata->context, PG_GETARG_ARRAYTYPE_P(2),
									 text_to_cstring(PG_GETARG_TEXT_PP(0)));
		if (context == NULL)
			PG_RE_THROW();
		FlushErrorState();
		edata->context = context;
		ReThrowError(edata);
	}
	PG_END_TRY();

	result = DatumGetHeapTupleHeader(SPI_getbinval(SPI_tuptable->vals[0],
												   SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		elog(ERROR, "rl_proxy_take_all_detail_first answered NULL");
	allowed = DatumGetBool(GetAttributeByName(result, "allowed", &isnull)) && !isnull;
	if (allowed)
	{
		MemoryContext old = MemoryContextSwitchTo(taken_context);
		TakenPart  *t = palloc(sizeof(TakenPart));

		t->idx = PG_GETARG_ARRAYTYPE_P_COPY(2);
		t->limiters = PG_GETARG_ARRAYTYPE_P_COPY(3);
		t->keys = PG_GETARG_ARRAYTYPE_P_COPY(4);
		t->costs = PG_ARGISNULL(7) ? NULL : PG_GETARG_ARRAYTYPE_P_COPY(7);
		t->by_policy = by_policy;
		taken = lappend(taken, t);
		MemoryContextSwitchTo(old);
	}
	result = (HeapTupleHeader) SPI_datumTransfer(HeapTupleHeaderGetDatum(result), false, -1);
	SPI_finish();
	PG_RETURN_HEAPTUPLEHEADER(result);
}

/*
 * The positions of part t to give back, as text: those of its limiters that
 * are not shadow on its shard (a part by explicit limits has none); NULL
 * when none is left.  In SPI.
 */
static char *
positions_to_refund(TakenPart *t, const char *schema)
{
	Oid			types[3] = {INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID};
	Datum		values[3];
	bool		isnull;
	Datum		positions;

	if (!t->by_policy)
		return array_text(t->idx);
	values[0] = PointerGetDatum(t->idx);
	values[1] = PointerGetDatum(t->limiters);
	values[2] = PointerGetDatum(t->keys);
	if (SPI_execute_with_args(psprintf("SELECT array_agg(i ORDER BY o) FROM unnest($1) WITH ORDINALITY AS u(i, o)"
									   " WHERE $2[i] <> ALL (ARRAY(SELECT limiter FROM %1$s.rl_proxy_policies_on("
									   "%1$s.rl_shard_hash($2[$1[1]], $3[$1[1]])) WHERE shadow))", schema),
							  3, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "the positions to refund were not found");
	positions = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : array_text(DatumGetArrayTypeP(positions));
}

/*
 * positions_to_refund, or NULL with a warning when the part's shard cannot
 * be asked: its cells stay spent, as when the refund itself cannot reach it,
 * and the other parts are still given back.  In SPI, whose connection the
 * subtransaction leaves open.
 */
static char *
positions_to_refund_or_warn(TakenPart *t, const char *schema)
{
	MemoryContext caller = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	char	   *volatile positions = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller);
	PG_TRY();
	{
		positions = positions_to_refund(t, schema);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(caller);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ereport(WARNING,
				(errmsg("ratelimit_proxy could not refund a part after a denied rl_take_all: %s",
						edata->message),
				 errdetail("The cells of the elements %s stay spent.",
						   array_text(t->idx))));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(caller);
	CurrentResourceOwner = owner;
	return positions;
}

/*
 * rl_proxy_taken(): the parts remembered as taken since the call began, each
 * once, with only the positions that spent: what rl_proxy_refund_taken gives
 * back.
 */
Datum
rl_proxy_taken(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const char *schema = function_schema(fcinfo->flinfo->fn_oid);
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	foreach(lc, taken)
	{
		TakenPart  *t = lfirst(lc);
		char	   *idx = positions_to_refund_or_warn(t, schema);
		Datum		values[4];
		bool		nulls[4] = {false, false, false, t->costs == NULL};

		if (idx == NULL)
			continue;
		values[0] = CStringGetTextDatum(idx);
		values[1] = CStringGetTextDatum(array_text(t->limiters));
		values[2] = CStringGetTextDatum(array_text(t->keys));
		values[3] = t->costs ? CStringGetTextDatum(array_text(t->costs)) : (Datum) 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	forget_taken();
	return (Datum) 0;
}

/* rl_proxy_forget_taken(): the call is over, nothing is to be given back */
Datum
rl_proxy_forget_taken(PG_FUNCTION_ARGS)
{
	forget_taken();
	PG_RETURN_VOID();
}
