/*
 * rl_floor.c
 *		The floor of bench/run that has rl_take's shape: a C function with
 *		rl_take's arguments and result type that decides nothing.  Called the
 *		same way with the same keys, it costs what every call of that shape
 *		costs (the protocol, the executor's function scan, the result tuple
 *		and its output functions), so rl_take / rl_floor is the share of a
 *		decision that is the extension's own work.
 *
 * Built and installed only into bench/run's private installation, never with
 * the extension.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(rl_floor);

/*
 * rl_floor(limiter, key, rate, burst, cost) RETURNS rl_decision: always
 * allowed, with a full bucket's remaining and no wait.  The blessed
 * descriptor is made once per backend, as rl_take keeps its own.
 */
Datum
rl_floor(PG_FUNCTION_ARGS)
{
	static TupleDesc desc = NULL;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (desc == NULL)
	{
		TupleDesc	found;
		MemoryContext old;

		if (get_call_result_type(fcinfo, NULL, &found) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		old = MemoryContextSwitchTo(TopMemoryContext);
		desc = BlessTupleDesc(CreateTupleDescCopy(found));
		MemoryContextSwitchTo(old);
	}
	values[0] = BoolGetDatum(true);
	values[1] = Int32GetDatum(PG_ARGISNULL(3) ? 0 : PG_GETARG_INT32(3));
	values[2] = Float8GetDatum(0.0);
	values[3] = Float8GetDatum(0.0);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
