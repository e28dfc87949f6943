/*
 * bucket_store.c
 *		All access to the rl_buckets table: read, compare-and-swap, delete.
 *
 * The statements are prepared once per backend with a schema-qualified table
 * name and pg_catalog operators, so the caller's search_path cannot redirect
 * them and no catalog look-up happens per call.  The table is private to the
 * extension's owner: the functions run these statements as that owner, the
 * way PostgreSQL runs its own internal queries (foreign-key checks, for one).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "ratelimit.h"

typedef enum StorePlan
{
	PLAN_READ,
	PLAN_READ_LOCKED,
	PLAN_INSERT,
	PLAN_SWAP,
	PLAN_DELETE,
	PLAN_DELETE_EXPIRED,
	NUM_STORE_PLANS
} StorePlan;

typedef struct StorePlanDef
{
	const char *sql;			/* %1$s is the qualified table name */
	int			nargs;
	Oid			argtypes[5];
} StorePlanDef;

#define EQ " OPERATOR(pg_catalog.=) "
#define LT " OPERATOR(pg_catalog.<) "
#define GT " OPERATOR(pg_catalog.>) "

static const StorePlanDef store_plan_defs[NUM_STORE_PLANS] = {
	[PLAN_READ] = {
		"SELECT tat, interval_us FROM %1$s WHERE key" EQ "$1",
		1, {BYTEAOID}
	},
	[PLAN_READ_LOCKED] = {
		"SELECT tat, interval_us FROM %1$s WHERE key" EQ "$1 FOR UPDATE",
		1, {BYTEAOID}
	},
	[PLAN_INSERT] = {
		"INSERT INTO %1$s (key, tat, interval_us) VALUES ($1, $2, $3)"
		" ON CONFLICT (key) DO NOTHING",
		3, {BYTEAOID, TIMESTAMPTZOID, INT8OID}
	},
	/* succeeds only if nobody changed the bucket since it was read */
	[PLAN_SWAP] = {
		"UPDATE %1$s SET tat = $2, interval_us = $3"
		" WHERE key" EQ "$1 AND tat" EQ "$4 AND interval_us" EQ "$5",
		5, {BYTEAOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, INT8OID}
	},
	[PLAN_DELETE] = {
		"DELETE FROM %1$s WHERE key" EQ "$1",
		1, {BYTEAOID}
	},

	/*
	 * The outer tat test is rechecked on the newest row version, so a bucket
	 * that a concurrent decision has just moved into the future stays.  A
	 * NULL limit deletes them all.  Only rows after $3 are read (a TID range
	 * scan), so the batches of a run read the table once, not once each.
	 */
	[PLAN_DELETE_EXPIRED] = {
		"WITH deleted AS (DELETE FROM %1$s WHERE ctid" EQ "ANY (ARRAY("
		"SELECT ctid FROM %1$s WHERE ctid" GT "$3 AND tat" LT "$1 LIMIT $2))"
		" AND tat" LT "$1 RETURNING ctid)"
		" SELECT pg_catalog.count(*), pg_catalog.max(ctid) FROM deleted",
		3, {TIMESTAMPTZOID, INT8OID, TIDOID}
	},
};

/* Where rl_buckets lives and who owns it; InvalidOid: look it up again. */
static Oid	store_namespace = InvalidOid;
static Oid	store_owner = InvalidOid;

static SPIPlanPtr store_plans[NUM_STORE_PLANS];
static Oid	store_plans_namespace = InvalidOid;

/* the caller's identity, restored by bucket_store_disconnect */
static Oid	saved_user;
static int	saved_sec_context;

/*
 * Any change to pg_proc (DROP and CREATE EXTENSION, ALTER EXTENSION ... SET
 * SCHEMA) may have moved the table: look again at the next call.
 */
static void
forget_store_identity(Datum arg, int cacheid, uint32 hashvalue)
{
	store_namespace = InvalidOid;
}

static void
resolve_store_identity(Oid fn_oid)
{
	static bool callback_registered = false;
	HeapTuple	tuple;
	Form_pg_proc proc;

	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, forget_store_identity, (Datum) 0);
		callback_registered = true;
	}

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn_oid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn_oid);
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	store_namespace = proc->pronamespace;
	store_owner = proc->proowner;
	ReleaseSysCache(tuple);
}

static void
prepare_store_plans(Oid namespace)
{
	char	   *nspname = get_namespace_name(namespace);
	char	   *table;
	int			i;

	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for namespace %u", namespace);
	table = quote_qualified_identifier(nspname, "rl_buckets");

	for (i = 0; i < NUM_STORE_PLANS; i++)
	{
		const StorePlanDef *def = &store_plan_defs[i];
		SPIPlanPtr	plan;

		if (store_plans[i] != NULL)
		{
			SPI_freeplan(store_plans[i]);
			store_plans[i] = NULL;
		}
		plan = SPI_prepare(psprintf(def->sql, table), def->nargs,
						   (Oid *) def->argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 def->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		store_plans[i] = plan;
	}
	store_plans_namespace = namespace;
}

/*
 * Open the store for the SQL function fn_oid: the table lives where the
 * function does, and belongs to the function's owner.
 */
void
bucket_store_connect(Oid fn_oid)
{
	if (!OidIsValid(store_namespace))
		resolve_store_identity(fn_oid);
	bucket_store_connect_to(store_namespace, store_owner);
}

/*
 * Open the store whose table is in namespace and belongs to owner: switch to
 * the owner and connect to SPI.  Pair with bucket_store_disconnect; an error
 * in between restores the caller's identity through transaction abort.
 */
void
bucket_store_connect_to(Oid namespace, Oid owner)
{
	GetUserIdAndSecContext(&saved_user, &saved_sec_context);
	SetUserIdAndSecContext(owner,
						   saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (store_plans_namespace != namespace)
		prepare_store_plans(namespace);
}

void
bucket_store_disconnect(void)
{
	SPI_finish();
	SetUserIdAndSecContext(saved_user, saved_sec_context);
}

/* Unlogged tables cannot be read during recovery: say so plainly. */
void
bucket_store_refuse_recovery(const char *function)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("%s cannot run on a hot standby", function),
				 errdetail("Rate-limit buckets live in an unlogged table, which is empty and unreadable during recovery."),
				 errhint("Send rate-limit calls to the primary.")));
}

static void
execute(StorePlan which, Datum *values, const char *nulls, long count)
{
	int			rc = SPI_execute_plan(store_plans[which], values, nulls, false,
									  count);

	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
}

static void
read_bucket(StorePlan which, bytea *key, GcraBucket *bucket)
{
	Datum		values[1] = {PointerGetDatum(key)};
	bool		isnull;

	execute(which, values, NULL, 1);
	bucket->present = SPI_processed == 1;
	if (!bucket->present)
		return;
	bucket->tat_us = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc,
													   1, &isnull));
	bucket->interval_us = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc,
													  2, &isnull));
}

/* Store a decision unless the bucket changed since it was read. */
static bool
store_bucket(bytea *key, const GcraBucket *read, const GcraDecision *d,
			 const GcraLimit *limit)
{
	Datum		values[5] = {
		PointerGetDatum(key),
		TimestampTzGetDatum(d->new_tat_us),
		Int64GetDatum(limit->interval_us),
		TimestampTzGetDatum(read->tat_us),
		Int64GetDatum(read->interval_us)
	};

	execute(read->present ? PLAN_SWAP : PLAN_INSERT, values, NULL, 0);
	return SPI_processed == 1;
}

/*
 * Decide a request against the bucket of key and store what must be stored.
 *
 * The first read takes no lock: tat only grows, so a denial seen on any
 * snapshot is still a denial on the newest one, and it writes and locks
 * nothing.  A decision that must store swaps the row only if it is unchanged
 * since that read; if another decision on the key got there first, the row
 * is read again under its lock, which queues this call behind the other.
 */
GcraDecision
bucket_store_take(bytea *key, const GcraLimit *limit, int64 now, int32 cost)
{
	GcraBucket	bucket;
	GcraDecision d;

	read_bucket(PLAN_READ, key, &bucket);
	d = gcra_decide(limit, &bucket, now, cost);
	if (!d.store || store_bucket(key, &bucket, &d, limit))
		return d;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		read_bucket(PLAN_READ_LOCKED, key, &bucket);
		d = gcra_decide(limit, &bucket, now, cost);

		/* fails only when a concurrent insert of the key won: read again */
		if (!d.store || store_bucket(key, &bucket, &d, limit))
			return d;
	}
}

bool
bucket_store_delete(bytea *key)
{
	Datum		values[1] = {PointerGetDatum(key)};

	execute(PLAN_DELETE, values, NULL, 0);
	return SPI_processed > 0;
}

/*
 * Delete up to batch_size buckets whose tat is before now (all of them when
 * batch_size <= 0) among the rows after *position, and move *position to the
 * last row deleted: the next batch of a run starts there.  Such a bucket is
 * the same as an absent one.
 */
int64
bucket_store_delete_expired(TimestampTz now, int64 batch_size,
							ItemPointer position)
{
	Datum		values[3] = {
		TimestampTzGetDatum(now),
		Int64GetDatum(batch_size),
		PointerGetDatum(position)
	};
	char		nulls[3] = {' ', batch_size > 0 ? ' ' : 'n', ' '};
	HeapTuple	result;
	bool		isnull;
	int64		deleted;

	execute(PLAN_DELETE_EXPIRED, values, nulls, 0);
	result = SPI_tuptable->vals[0];
	deleted = DatumGetInt64(SPI_getbinval(result, SPI_tuptable->tupdesc, 1,
										  &isnull));
	if (deleted > 0)
		*position = *(ItemPointer) DatumGetPointer(SPI_getbinval(result,
																 SPI_tuptable->tupdesc,
																 2, &isnull));
	return deleted;
}
