/*
 * bucket_store.c
 *		All access to the bucket tables, rl_buckets and (1.3) the logged
 *		rl_buckets_durable: read, update, insert, delete.  Both have the same
 *		columns and are served by the same code; a call names the table.
 *
 * A decision reads its bucket through the primary-key index and updates it
 * with the table access method directly: one index probe and one heap update,
 * with no executor start-up, which is what a decision per request costs
 * (see bench/).  The update is a compare-and-swap on the row version the
 * decision read: if another transaction changed the row first, the decision
 * is made again on the newest version, under its row lock.
 *
 * A key's first row is inserted the same way, by the speculative insertion
 * of INSERT ... ON CONFLICT DO NOTHING.  Neither takes a predicate lock or
 * checks a row against the transaction's snapshot: a decision is the same
 * whatever the caller's isolation level, and under SERIALIZABLE or
 * REPEATABLE READ concurrent decisions on a key never fail with a
 * serialization error (the row lock orders them, as under READ COMMITTED).
 *
 * The rarer statements (deletes, counts) go through SPI with plans prepared
 * once per backend, schema-qualified names and pg_catalog operators, so the
 * caller's search_path cannot redirect them.  The table is private to the
 * extension's owner: these run as that owner, the way PostgreSQL runs its
 * own internal queries (foreign-key checks, for one).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "pg_compat.h"
#include "ratelimit.h"

/*
 * Bucket table columns, checked when a table is first found: 1.0's three,
 * and from 1.3 the lock of a key (NULL, NULL: never locked).  The library
 * serves a database whose extension is not updated yet with the rl_buckets
 * it has (and no rl_buckets_durable: no policy there can be durable).
 */
#define ATT_KEY 1
#define ATT_TAT 2
#define ATT_INTERVAL 3
#define ATT_LOCK_UNTIL 4
#define ATT_LOCK_US 5
#define BUCKET_NATTS_1_0 3
#define BUCKET_NATTS 5

typedef enum StorePlan
{
	PLAN_DELETE,
	PLAN_DELETE_EXPIRED,
	PLAN_COUNT,
	NUM_STORE_PLANS
} StorePlan;

typedef struct StorePlanDef
{
	/* %1$s is the qualified table name, %2$s the test of a passed bucket */
	const char *sql;
	int			nargs;
	Oid			argtypes[3];
} StorePlanDef;

#define EQ " OPERATOR(pg_catalog.=) "
#define GT " OPERATOR(pg_catalog.>) "
#define LE " OPERATOR(pg_catalog.<=) "

/*
 * A bucket the same as an absent one at $1 (gcra_bucket_forgotten): its tat
 * has passed, and so has the time in which a new offence would lengthen its
 * last lockout.  (OPERATOR() binds like any other operator: left to right.)
 */
#define PASSED_1_0 "tat" LE "$1"
#define PASSED "tat" LE "$1 AND (lock_until IS NULL OR (lock_until" \
	" OPERATOR(pg_catalog.+) (lock_us OPERATOR(pg_catalog.*)" \
	" '1 microsecond'::pg_catalog.interval))" LE "$1)"

static const StorePlanDef store_plan_defs[NUM_STORE_PLANS] = {
	[PLAN_DELETE] = {
		"DELETE FROM %1$s WHERE key" EQ "$1",
		1, {BYTEAOID}
	},

	/*
	 * The outer tat test is rechecked on the newest row version, so a bucket
	 * that a concurrent decision has just moved into the future stays.  A
	 * NULL limit deletes them all.  Only rows after $3 are read (a TID range
	 * scan), so the batches of a run read the table once, not once each.
	 * The inner select locks the rows it picks and skips any locked row: a
	 * batch never waits on a decision, so it never holds the locks of the
	 * rows it picked before while waiting; a skipped row goes at the next run.
	 */
	[PLAN_DELETE_EXPIRED] = {
		"WITH deleted AS (DELETE FROM %1$s WHERE ctid" EQ "ANY (ARRAY("
		"SELECT ctid FROM %1$s WHERE ctid" GT "$3 AND %2$s LIMIT $2"
		" FOR UPDATE SKIP LOCKED))"
		" AND %2$s RETURNING ctid)"
		" SELECT pg_catalog.count(*), pg_catalog.max(ctid) FROM deleted",
		3, {TIMESTAMPTZOID, INT8OID, TIDOID}
	},
	[PLAN_COUNT] = {
		"SELECT pg_catalog.count(*) FROM %1$s",
		0, {InvalidOid}
	},
};

/* One bucket table: its name, and once resolved its OID and primary key. */
typedef struct StoreTable
{
	const char *name;
	Oid			relid;			/* InvalidOid: the database has no such table */
	Oid			indexid;
	bool		has_lock;		/* 1.3's lock columns */
	SPIPlanPtr	plans[NUM_STORE_PLANS];
} StoreTable;

/*
 * Where the bucket tables live, who owns them, and their primary-key
 * indexes: the store a call works on, resolved at most once per call, when
 * the call begins.
 *
 * Any change to pg_proc (DROP and CREATE EXTENSION, ALTER EXTENSION ... SET
 * SCHEMA, but also any function DDL in the database), to the table or its
 * index (VACUUM and ANALYZE too) and a sinval reset make the resolution
 * stale.  Such an invalidation is delivered whenever the call takes a lock,
 * so it only counts in store_invalidations: the running call keeps the
 * table it began with (the locks it takes keep that table from being
 * dropped, and one dropped before it was locked is an error, never "no
 * table"), and the next call resolves again.
 */
static Oid	store_namespace = InvalidOid;
static Oid	store_owner = InvalidOid;
static StoreTable store_tables[NUM_BUCKET_TABLES] = {
	[BUCKETS_UNLOGGED] = {"rl_buckets"},
	[BUCKETS_DURABLE] = {"rl_buckets_durable"},
};
static uint64 store_invalidations = 0;
static uint64 store_resolved_at = 0;	/* store_invalidations then */

/*
 * The kept plans name the table by its schema's name: any change to a schema
 * (ALTER SCHEMA ... RENAME) prepares them again, as the plan cache would
 * parse their old text again and fail.
 */
static Oid	store_plans_namespace = InvalidOid;

/* the caller's identity, restored by bucket_store_disconnect */
static Oid	saved_user;
static int	saved_sec_context;

static void
forget_store_on_proc_change(Datum arg, int cacheid, uint32 hashvalue)
{
	store_invalidations++;
}

static void
forget_plans_on_namespace_change(Datum arg, int cacheid, uint32 hashvalue)
{
	store_plans_namespace = InvalidOid;
}

static void
forget_store_on_relation_change(Datum arg, Oid relid)
{
	int			t;

	for (t = 0; t < NUM_BUCKET_TABLES; t++)
		if (relid == InvalidOid || relid == store_tables[t].relid ||
			relid == store_tables[t].indexid)
			store_invalidations++;
}

static bool
store_stale(void)
{
	return !OidIsValid(store_tables[BUCKETS_UNLOGGED].relid) ||
		store_resolved_at != store_invalidations;
}

/*
 * Open a bucket table by its OID.  A DROP EXTENSION that a caller queued
 * behind while it waited for the lock drops the table first: say so plainly.
 */
static Relation
open_buckets(const StoreTable *table, LOCKMODE lockmode)
{
	Relation	rel = OidIsValid(table->relid) ?
		try_table_open(table->relid, lockmode) : NULL;

	if (rel == NULL)
	{
		store_invalidations++;
		refuse_dropped_table(table->name);
	}
	return rel;
}

/*
 * Find table in namespace and check it is ours: its OID, primary key and
 * columns in *found.  An absent rl_buckets_durable (a database at 1.2) is
 * no table.
 */
static void
resolve_table(Oid namespace, BucketTable which, StoreTable *found)
{
	Relation	rel;
	TupleDesc	desc;
	Oid			indexid;

	found->name = store_tables[which].name;
	found->relid = get_relname_relid(found->name, namespace);
	if (!OidIsValid(found->relid) && which == BUCKETS_DURABLE)
		return;
	rel = open_buckets(found, AccessShareLock);
	indexid = rl_primary_key_index(rel);
	desc = RelationGetDescr(rel);
	if ((desc->natts != BUCKET_NATTS_1_0 && desc->natts != BUCKET_NATTS) ||
		TupleDescAttr(desc, ATT_TAT - 1)->atttypid != TIMESTAMPTZOID ||
		TupleDescAttr(desc, ATT_INTERVAL - 1)->atttypid != INT8OID ||
		(desc->natts == BUCKET_NATTS &&
		 (TupleDescAttr(desc, ATT_LOCK_UNTIL - 1)->atttypid != TIMESTAMPTZOID ||
		  TupleDescAttr(desc, ATT_LOCK_US - 1)->atttypid != INT8OID)) ||
		!OidIsValid(indexid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" is not the one ratelimit created",
						RelationGetRelationName(rel)),
				 errhint("Drop and create the extension again.")));
	found->indexid = indexid;
	found->has_lock = desc->natts == BUCKET_NATTS;
	table_close(rel, NoLock);
}

/*
 * Find the bucket tables in namespace, owned by owner.  The resolution
 * changes only once it is complete: an error on the way (a cancelled lock
 * wait, too) leaves it stale.
 */
static void
resolve_store(Oid namespace, Oid owner)
{
	static bool callbacks_registered = false;
	uint64		invalidations_seen = store_invalidations;
	StoreTable	found[NUM_BUCKET_TABLES] = {0};
	int			t;

	if (!callbacks_registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, forget_store_on_proc_change, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, forget_plans_on_namespace_change, (Datum) 0);
		CacheRegisterRelcacheCallback(forget_store_on_relation_change, (Datum) 0);
		callbacks_registered = true;
	}

	for (t = 0; t < NUM_BUCKET_TABLES; t++)
		resolve_table(namespace, t, &found[t]);
	for (t = 0; t < NUM_BUCKET_TABLES; t++)
	{
		if (store_tables[t].relid != found[t].relid ||
			store_tables[t].has_lock != found[t].has_lock)
			store_plans_namespace = InvalidOid; /* the plans name the old ones */
		store_tables[t].relid = found[t].relid;
		store_tables[t].indexid = found[t].indexid;
		store_tables[t].has_lock = found[t].has_lock;
	}
	store_namespace = namespace;
	store_owner = owner;
	/* what arrived while the tables were opened is for the next call */
	store_resolved_at = invalidations_seen;
}

/* The plans of every bucket table the database has. */
static void
prepare_store_plans(void)
{
	char	   *schema = get_namespace_name(store_namespace);
	int			t;
	int			i;

	for (t = 0; t < NUM_BUCKET_TABLES; t++)
	{
		StoreTable *table = &store_tables[t];
		char	   *name = quote_qualified_identifier(schema, table->name);

		for (i = 0; i < NUM_STORE_PLANS; i++)
		{
			const StorePlanDef *def = &store_plan_defs[i];
			SPIPlanPtr	plan;

			if (table->plans[i] != NULL)
			{
				SPI_freeplan(table->plans[i]);
				table->plans[i] = NULL;
			}
			if (!OidIsValid(table->relid))
				continue;
			plan = SPI_prepare(psprintf(def->sql, name,
										table->has_lock ? PASSED : PASSED_1_0),
							   def->nargs, (Oid *) def->argtypes);
			if (plan == NULL)
				elog(ERROR, "SPI_prepare failed for \"%s\": %s",
					 def->sql, SPI_result_code_string(SPI_result));
			if (SPI_keepplan(plan) != 0)
				elog(ERROR, "SPI_keepplan failed");
			table->plans[i] = plan;
		}
	}
	store_plans_namespace = store_namespace;
}

/* Run as the store's owner until bucket_store_disconnect. */
static void
become_store_owner(void)
{
	GetUserIdAndSecContext(&saved_user, &saved_sec_context);
	SetUserIdAndSecContext(store_owner,
						   saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/*
 * Open the store for the SQL function fn_oid: the table lives where the
 * function does, and belongs to the function's owner.  Pair with
 * bucket_store_disconnect; an error in between restores the caller's
 * identity through transaction abort.
 */
void
bucket_store_connect(Oid fn_oid)
{
	if (store_stale())
	{
		HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn_oid));
		Form_pg_proc proc;

		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "cache lookup failed for function %u", fn_oid);
		proc = (Form_pg_proc) GETSTRUCT(tuple);
		resolve_store(proc->pronamespace, proc->proowner);
		ReleaseSysCache(tuple);
	}
	become_store_owner();
}

/*
 * Open the store whose table is in namespace and belongs to owner, as that
 * owner, like bucket_store_connect.
 */
void
bucket_store_connect_to(Oid namespace, Oid owner)
{
	if (store_stale() || namespace != store_namespace || owner != store_owner)
		resolve_store(namespace, owner);
	become_store_owner();
}

void
bucket_store_disconnect(void)
{
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

/*
 * Run one prepared statement in a new SPI connection; the caller reads its
 * result and calls SPI_finish.
 */
static void
execute_plan(const StoreTable *table, StorePlan which, Datum *values,
			 const char *nulls)
{
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (store_plans_namespace != store_namespace)
		prepare_store_plans();
	rc = SPI_execute_plan(table->plans[which], values, nulls, false, 0);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
}

/* Run one prepared statement; returns the number of rows it processed. */
static uint64
run_plan(const StoreTable *table, StorePlan which, Datum *values,
		 const char *nulls)
{
	uint64		processed;

	execute_plan(table, which, values, nulls);
	processed = SPI_processed;
	SPI_finish();
	return processed;
}

/* The open table, its index, and the slots one decision uses. */
struct BucketAccess
{
	const StoreTable *table;
	Relation	heap;
	Relation	index;
	Snapshot	snapshot;
	TupleTableSlot *found;		/* the row version the decision is based on */
	TupleTableSlot *replacement;	/* made by the first update */
	bytea	   *key;
};

static void
open_access(BucketAccess *access, BucketTable which, bytea *key)
{
	access->table = &store_tables[which];
	access->key = key;
	access->heap = open_buckets(access->table, RowExclusiveLock);
	access->index = index_open(access->table->indexid, RowExclusiveLock);
	access->found = table_slot_create(access->heap, NULL);
}

static void
close_access(BucketAccess *access)
{
	ExecDropSingleTupleTableSlot(access->found);
	if (access->replacement != NULL)
		ExecDropSingleTupleTableSlot(access->replacement);
	if (access->snapshot != NULL)
		UnregisterSnapshot(access->snapshot);
	index_close(access->index, NoLock);
	table_close(access->heap, NoLock);
}

/* *bucket := the row version in access->found */
static void
bucket_from_slot(const BucketAccess *access, GcraBucket *bucket)
{
	TupleTableSlot *slot = access->found;
	bool		isnull;

	bucket->present = true;
	bucket->tat_us = DatumGetTimestampTz(slot_getattr(slot, ATT_TAT, &isnull));
	Assert(!isnull);
	bucket->interval_us = DatumGetInt64(slot_getattr(slot, ATT_INTERVAL, &isnull));
	Assert(!isnull && bucket->interval_us > 0);
	bucket->lock_until_us = 0;
	bucket->lock_us = 0;
	if (access->table->has_lock)
	{
		Datum		lock_until = slot_getattr(slot, ATT_LOCK_UNTIL, &isnull);

		if (!isnull)
		{
			bucket->lock_until_us = DatumGetTimestampTz(lock_until);
			bucket->lock_us = DatumGetInt64(slot_getattr(slot, ATT_LOCK_US, &isnull));
			if (isnull)
				bucket->lock_us = 0;
		}
	}
}

/*
 * Read the newest committed version of the bucket, and this transaction's
 * own changes: a fresh snapshot, whatever the isolation level, so that the
 * limit is exact across transactions.
 *
 * Under SERIALIZABLE an index scan with an MVCC snapshot takes predicate
 * locks and checks for conflicts, which concurrent decisions on a key turn
 * into serialization failures, though the row lock already orders them.  So
 * there the scan uses SnapshotAny, which does neither, and each version it
 * returns is tested against the fresh snapshot: the same row version as a
 * scan with that snapshot finds.  (A snapshot that is not MVCC, SnapshotSelf,
 * would miss a row whose non-HOT update commits during the scan: the new
 * version's index entry read before the commit, the old one's after.)  Other
 * isolation levels take no predicate locks, and keep the MVCC scan: it walks
 * a hot key's HOT chain under one buffer lock, where SnapshotAny returns each
 * dead version of it in turn (a quarter more instructions per decision).
 */
static void
read_bucket(BucketAccess *access, GcraBucket *bucket)
{
	bool		serializable = IsolationIsSerializable();
	ScanKeyData skey;
	IndexScanDesc scan;

	if (access->snapshot != NULL)
		UnregisterSnapshot(access->snapshot);
	access->snapshot = RegisterSnapshot(GetLatestSnapshot());

	ScanKeyInit(&skey, ATT_KEY, BTEqualStrategyNumber, F_BYTEAEQ,
				PointerGetDatum(access->key));
	scan = rl_index_beginscan(access->heap, access->index,
							  serializable ? SnapshotAny : access->snapshot, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	bucket->present = false;
	while (index_getnext_slot(scan, ForwardScanDirection, access->found))
		if (!serializable ||
			table_tuple_satisfies_snapshot(access->heap, access->found,
										   access->snapshot))
		{
			bucket_from_slot(access, bucket);
			break;
		}
	index_endscan(scan);
}

/*
 * The table and its indexes, as a statement that writes it opens them;
 * speculative also prepares what a speculative insertion checks.
 */
static ResultRelInfo *
open_indexes(Relation heap, bool speculative)
{
	ResultRelInfo *result_rel = makeNode(ResultRelInfo);

	InitResultRelInfo(result_rel, heap, 1, NULL, 0);
	ExecOpenIndices(result_rel, speculative);
	return result_rel;
}

/*
 * A new version that is not a HOT update needs entries in every index of the
 * table, as an UPDATE statement makes them: the primary key, and any index
 * being built concurrently (REINDEX CONCURRENTLY) or added by the owner.
 * From 16 a HOT update that changed a summarizing index's column needs
 * entries in those indexes alone: update_indexes says which.
 */
static void
insert_index_entries(Relation heap, TupleTableSlot *slot,
					 RlUpdateIndexes update_indexes)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *result_rel = open_indexes(heap, false);

	/*
	 * update = false: true only adds a hint for bottom-up index deletion, and
	 * working it out needs a range table this estate does not have.
	 */
	rl_insert_update_index_tuples(result_rel, slot, estate, update_indexes);
	ExecCloseIndices(result_rel);
	FreeExecutorState(estate);
}

/*
 * The row of the key of access holding bucket in access->replacement; a key
 * never locked has NULL lock columns.
 */
static TupleTableSlot *
bucket_row(BucketAccess *access, const GcraBucket *bucket)
{
	TupleTableSlot *slot;
	bool		never_locked = bucket->lock_until_us == 0 && bucket->lock_us == 0;

	if (access->replacement == NULL)
		access->replacement = MakeSingleTupleTableSlot(RelationGetDescr(access->heap),
													   &TTSOpsVirtual);
	slot = access->replacement;
	ExecClearTuple(slot);
	slot->tts_values[ATT_KEY - 1] = PointerGetDatum(access->key);
	slot->tts_values[ATT_TAT - 1] = TimestampTzGetDatum(bucket->tat_us);
	slot->tts_values[ATT_INTERVAL - 1] = Int64GetDatum(bucket->interval_us);
	memset(slot->tts_isnull, false, slot->tts_tupleDescriptor->natts * sizeof(bool));
	if (access->table->has_lock)
	{
		slot->tts_values[ATT_LOCK_UNTIL - 1] = TimestampTzGetDatum(bucket->lock_until_us);
		slot->tts_values[ATT_LOCK_US - 1] = Int64GetDatum(bucket->lock_us);
		slot->tts_isnull[ATT_LOCK_UNTIL - 1] = never_locked;
		slot->tts_isnull[ATT_LOCK_US - 1] = never_locked;
	}
	return ExecStoreVirtualTuple(slot);
}

/* The bucket decision d stores under limit. */
static GcraBucket
decided_bucket(const GcraDecision *d, const GcraLimit *limit)
{
	GcraBucket	bucket = {0};

	bucket.present = true;
	bucket.tat_us = d->new_tat_us;
	bucket.interval_us = limit->interval_us;
	bucket.lock_until_us = d->new_lock_until_us;
	bucket.lock_us = d->new_lock_us;
	return bucket;
}

/*
 * Insert the first row of the key of access, as INSERT ... ON CONFLICT (key)
 * DO NOTHING does: a pre-check of the primary key (which waits for a
 * transaction still inserting the key), then a speculative insertion that
 * is taken back if another one got into the index first.  Unlike that
 * statement, it does not check that a conflicting row is visible to the
 * transaction's snapshot: under REPEATABLE READ or SERIALIZABLE that check
 * fails whenever another decision inserted the key after the snapshot was
 * taken, and a decision reads the newest row anyway.  False when the key has
 * a row already; the caller decides again.
 */
static bool
insert_bucket(BucketAccess *access, const GcraBucket *bucket)
{
	TupleTableSlot *slot = bucket_row(access, bucket);
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *result_rel = open_indexes(access->heap, true);
	List	   *arbiter = list_make1_oid(RelationGetRelid(access->index));
	ItemPointerData conflict;
	bool		inserted = false;

	for (;;)
	{
		uint32		token;
		bool		lost = false;

		CHECK_FOR_INTERRUPTS();
		if (!rl_check_index_constraints(result_rel, slot, estate, &conflict,
										arbiter))
			break;
		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(access->heap, slot,
									   GetCurrentCommandId(true), 0, NULL,
									   token);
		list_free(rl_insert_speculative_index_tuples(result_rel, slot, estate,
													 &lost, arbiter));
		table_tuple_complete_speculative(access->heap, slot, token, !lost);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());
		if (!lost)
		{
			inserted = true;
			break;
		}
		/* another insertion got there first: the pre-check now finds it */
	}
	list_free(arbiter);
	ExecCloseIndices(result_rel);
	FreeExecutorState(estate);
	return inserted;
}

/*
 * Replace the row version in access->found by bucket, as the heap update of
 * an UPDATE statement would.  Returns TM_Ok, or TM_Updated or TM_Deleted
 * when another transaction changed it first (after waiting for that one to
 * end).
 */
static TM_Result
swap_bucket(BucketAccess *access, const GcraBucket *bucket)
{
	TupleTableSlot *slot = bucket_row(access, bucket);
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	RlUpdateIndexes update_indexes;
	TM_Result	result;

	result = table_tuple_update(access->heap, &access->found->tts_tid, slot,
								GetCurrentCommandId(true), access->snapshot,
								InvalidSnapshot, true, &tmfd, &lockmode,
								&update_indexes);
	if (result == TM_Ok && RL_UPDATE_NEEDS_INDEX_ENTRIES(update_indexes))
		insert_index_entries(access->heap, slot, update_indexes);
	if (result != TM_Ok && result != TM_Updated && result != TM_Deleted)
		elog(ERROR, "unexpected result %d updating a rate-limit bucket", result);
	return result;
}

/*
 * Store a decision on the row version it was based on: update that version,
 * or insert the key if it had no row.  False when another decision on the
 * key changed or inserted the row first.
 */
static bool
store_bucket(BucketAccess *access, const GcraBucket *bucket,
			 const GcraDecision *d, const GcraLimit *limit)
{
	GcraBucket	decided = decided_bucket(d, limit);

	if (bucket->present)
		return swap_bucket(access, &decided) == TM_Ok;
	return insert_bucket(access, &decided);
}

/*
 * Lock the newest version of the row last read, following its update chain,
 * and read it.  False when that chain ends in a delete.
 */
static bool
lock_newest_bucket(BucketAccess *access, GcraBucket *bucket)
{
	TM_FailureData tmfd;
	ItemPointerData tid = access->found->tts_tid;
	TM_Result	result;

	result = table_tuple_lock(access->heap, &tid, access->snapshot,
							  access->found, GetCurrentCommandId(false),
							  LockTupleNoKeyExclusive, LockWaitBlock,
							  TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
	if (result == TM_Deleted)
		return false;
	if (result != TM_Ok)
		elog(ERROR, "unexpected result %d locking a rate-limit bucket", result);
	bucket_from_slot(access, bucket);
	return true;
}

/*
 * Decide a request against the bucket of key and store what must be stored.
 *
 * The first read takes no lock: tat only grows, so a denial seen on any
 * snapshot is still a denial on the newest one, and it writes and locks
 * nothing.  A decision that must store replaces exactly the version it read;
 * if another decision on the key got there first, the newest version is
 * locked, which queues this call behind the other, and decided again.  The
 * clock (DECIDE_NOW) is read after each read: a decision that stores was
 * made on the newest version, so after the clock of the one before it.
 *
 * With may_insert false (the memory store, which decides where a new key
 * lives), a key without a row is not inserted: the answer is false, nothing
 * was decided.
 */
bool
bucket_store_take(BucketTable which, bytea *key, const GcraLimit *limit,
				  int64 at, int32 cost, bool may_insert, GcraDecision *decision)
{
	BucketAccess access = {0};
	GcraBucket	bucket;
	GcraDecision d = {0};
	bool		stored = false;
	bool		decided = true;

	open_access(&access, which, key);
	read_bucket(&access, &bucket);
	for (;;)
	{
		if (!bucket.present && !may_insert)
		{
			decided = false;
			break;
		}
		d = gcra_decide(limit, &bucket, decision_time(at), cost);
		if (!d.store || (stored = store_bucket(&access, &bucket, &d, limit)))
			break;
		CHECK_FOR_INTERRUPTS();
		/* a row that was deleted or inserted meanwhile is read afresh */
		if (!bucket.present || !lock_newest_bucket(&access, &bucket))
			read_bucket(&access, &bucket);
	}

	/* later calls in this transaction must see what this one stored */
	if (stored)
		CommandCounterIncrement();

	close_access(&access);
	if (decided)
		*decision = d;
	return decided;
}

/* Read the newest committed bucket of key, without a lock. */
void
bucket_store_read(BucketTable which, bytea *key, GcraBucket *bucket)
{
	BucketAccess access = {0};

	open_access(&access, which, key);
	read_bucket(&access, bucket);
	close_access(&access);
}

/*
 * Whether key has a row in rl_buckets (where the memory store spills) that
 * any transaction may still decide on: committed
 * and not deleted, or inserted by a transaction still in progress (a dirty
 * snapshot sees both).  *inserting is that transaction, if any, so the
 * caller can wait for it.  Reads one index page and one heap page; waits for
 * nothing.
 */
bool
bucket_store_probe(bytea *key, TransactionId *inserting)
{
	SnapshotData dirty;
	const StoreTable *table = &store_tables[BUCKETS_UNLOGGED];
	Relation	heap = open_buckets(table, RowExclusiveLock);
	Relation	index = index_open(table->indexid, RowExclusiveLock);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	ScanKeyData skey;
	IndexScanDesc scan;
	bool		found;

	InitDirtySnapshot(dirty);
	ScanKeyInit(&skey, ATT_KEY, BTEqualStrategyNumber, F_BYTEAEQ,
				PointerGetDatum(key));
	scan = rl_index_beginscan(heap, index, &dirty, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	*inserting = found ? dirty.xmin : InvalidTransactionId;
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return found;
}

/* Insert a new bucket in rl_buckets; false when the key has a row already. */
bool
bucket_store_insert(bytea *key, const GcraBucket *bucket)
{
	BucketAccess access = {0};
	bool		inserted;

	open_access(&access, BUCKETS_UNLOGGED, key);
	inserted = insert_bucket(&access, bucket);
	close_access(&access);
	if (inserted)
		CommandCounterIncrement();
	return inserted;
}

/*
 * The OID of the connected call's rl_buckets: it tells one installation of
 * the extension.  Never InvalidOid: a connected call has resolved its store.
 */
Oid
bucket_store_relid(void)
{
	Assert(OidIsValid(store_tables[BUCKETS_UNLOGGED].relid));
	return store_tables[BUCKETS_UNLOGGED].relid;
}

/* How many buckets the bucket tables hold, passed ones included. */
int64
bucket_store_count(void)
{
	int64		count = 0;
	int			t;

	for (t = 0; t < NUM_BUCKET_TABLES; t++)
	{
		bool		isnull;

		if (!OidIsValid(store_tables[t].relid))
			continue;
		execute_plan(&store_tables[t], PLAN_COUNT, NULL, NULL);
		count += DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
		SPI_finish();
	}
	return count;
}

/*
 * Lock the newest version of the row of access and read it into *bucket:
 * the version last read, following its update chain, or the row read afresh
 * when there was none or it was deleted.  False when the key has no row.
 */
static bool
lock_row(BucketAccess *access, GcraBucket *bucket)
{
	for (;;)
	{
		if (!bucket->present)
		{
			read_bucket(access, bucket);
			if (!bucket->present)
				return false;
		}
		if (lock_newest_bucket(access, bucket))
			return true;
		CHECK_FOR_INTERRUPTS();
		bucket->present = false;
	}
}

/*
 * Lock the newest version of the bucket of access, inserting a passed one
 * (the same as none) first when it has no row, so that there is a row to
 * lock; *bucket is then that version.
 */
static void
lock_bucket(BucketAccess *access, GcraBucket *bucket, const GcraLimit *limit,
			int64 now)
{
	GcraBucket	passed = {0};

	passed.present = true;
	passed.tat_us = now - 1;
	passed.interval_us = limit->interval_us;
	while (!lock_row(access, bucket))
	{
		CHECK_FOR_INTERRUPTS();
		/* a concurrent insert of the key wins; then its row is read */
		if (insert_bucket(access, &passed))
			CommandCounterIncrement();
	}
}

/*
 * The row of key, locked, with *bucket its newest version; NULL when the
 * key has no row.  For a decision the caller makes and stores with
 * bucket_store_write_row; waits for the row's lock, so never call it under
 * an LWLock.
 */
BucketAccess *
bucket_store_lock_row(bytea *key, GcraBucket *bucket)
{
	BucketAccess *row = palloc0(sizeof(BucketAccess));

	open_access(row, BUCKETS_UNLOGGED, key);
	bucket->present = false;
	if (lock_row(row, bucket))
		return row;
	bucket_store_close_row(row);
	return NULL;
}

/*
 * The row of key in table which, locked, inserted as a passed bucket of limit
 * at now if it had none; *bucket its newest version.  For a decision the
 * caller makes and stores with bucket_store_write_row, as
 * bucket_store_lock_row.
 */
BucketAccess *
bucket_store_hold_row(BucketTable which, bytea *key, const GcraLimit *limit,
					  int64 now, GcraBucket *bucket)
{
	BucketAccess *row = palloc0(sizeof(BucketAccess));

	open_access(row, which, key);
	bucket->present = false;
	lock_bucket(row, bucket, limit, now);
	return row;
}

/* Store a decision on a locked row: nobody else can have changed it. */
void
bucket_store_write_row(BucketAccess *row, const GcraDecision *d,
					   const GcraLimit *limit)
{
	GcraBucket	decided = decided_bucket(d, limit);

	if (swap_bucket(row, &decided) != TM_Ok)
		elog(ERROR, "a locked rate-limit bucket was changed by another transaction");
	/* later calls in this transaction must see what this one stored */
	CommandCounterIncrement();
}

void
bucket_store_close_row(BucketAccess *row)
{
	close_access(row);
	pfree(row);
}

/*
 * order[] := the indexes of requests by stored key: the one order in which
 * every call over several keys locks them, so that two calls over the same
 * keys in any order never deadlock.  (An insertion sort: n <= 16.)
 */
void
bucket_store_key_order(const StoreRequest *requests, int n, int *order)
{
	int			i;
	int			j;

	for (i = 0; i < n; i++)
	{
		for (j = i; j > 0 &&
			 memcmp(VARDATA_ANY(requests[order[j - 1]].key),
					VARDATA_ANY(requests[i].key), BUCKET_KEY_LEN) > 0; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
}

/*
 * Decide n requests, each against its own bucket, all or nothing, and store
 * what must be stored.
 *
 * As in bucket_store_take, the first reads take no lock, and a call that has
 * nothing to store then writes and locks nothing.  Otherwise the buckets
 * that may store (cost > 0) are locked in the order of their stored keys
 * (bucket_store_key_order), and the requests are decided again, at the
 * clock read then, on the locked versions, which nobody else can change
 * before this transaction ends.
 */
void
bucket_store_take_all(const StoreRequest *requests, int n, int64 at,
					  GcraDecision *decisions)
{
	BucketAccess access[GCRA_MAX_REQUESTS] = {0};
	int			order[GCRA_MAX_REQUESTS];
	GcraRequest gcra[GCRA_MAX_REQUESTS] = {0};
	bool		must_store = false;
	int64		now;
	int			i;

	Assert(n >= 1 && n <= GCRA_MAX_REQUESTS);
	for (i = 0; i < n; i++)
	{
		open_access(&access[i], requests[i].table, requests[i].key);
		read_bucket(&access[i], &gcra[i].bucket);
		gcra[i].limit = requests[i].limit;
		gcra[i].cost = requests[i].cost;
		gcra[i].shadow = requests[i].shadow;
	}
	now = decision_time(at);
	gcra_decide_all(gcra, n, now, decisions);
	for (i = 0; i < n; i++)
		must_store |= decisions[i].store;

	if (must_store)
	{
		bucket_store_key_order(requests, n, order);
		for (i = 0; i < n; i++)
		{
			int			r = order[i];

			if (gcra[r].cost > 0)
				lock_bucket(&access[r], &gcra[r].bucket, &gcra[r].limit, now);
		}
		/* the clock once the call holds its rows */
		gcra_decide_all(gcra, n, decision_time(at), decisions);
		for (i = 0; i < n; i++)
			if (decisions[i].store)
				bucket_store_write_row(&access[i], &decisions[i], &gcra[i].limit);
	}

	for (i = 0; i < n; i++)
		close_access(&access[i]);
}

/*
 * Give cost cells back to the bucket of key, at the T it was stored with:
 * tat := max(now, tat - cost * T), its lock kept (a refund never ends a
 * lockout).  True when that changed a live bucket; a passed or absent one is
 * left alone.  Like a decision, it replaces the version it read, or locks
 * the newest one and computes again.
 */
bool
bucket_store_refund(BucketTable which, bytea *key, int64 now, int32 cost)
{
	BucketAccess access = {0};
	GcraBucket	bucket;
	bool		changed = false;

	open_access(&access, which, key);
	read_bucket(&access, &bucket);
	while (bucket.present && bucket.tat_us >= now)
	{
		__int128	back = (__int128) cost * bucket.interval_us;
		GcraBucket	refunded = bucket;

		refunded.tat_us = bucket.tat_us - back < now ? now : bucket.tat_us - (int64) back;
		if (refunded.tat_us == bucket.tat_us)
			break;
		if (swap_bucket(&access, &refunded) == TM_Ok)
		{
			changed = true;
			CommandCounterIncrement();
			break;
		}
		CHECK_FOR_INTERRUPTS();
		if (!lock_newest_bucket(&access, &bucket))
			break;				/* deleted meanwhile: nothing to give back */
	}
	close_access(&access);
	return changed;
}

/* Delete the buckets of key in every table; true when there was one. */
bool
bucket_store_delete(bytea *key)
{
	Datum		values[1] = {PointerGetDatum(key)};
	bool		deleted = false;
	int			t;

	for (t = 0; t < NUM_BUCKET_TABLES; t++)
		if (OidIsValid(store_tables[t].relid) &&
			run_plan(&store_tables[t], PLAN_DELETE, values, NULL) > 0)
			deleted = true;
	return deleted;
}

/*
 * Delete up to batch_size buckets of table which that are the same as an
 * absent one at now (PASSED; all of them when batch_size <= 0) among the
 * rows after *position, and move *position to the last row deleted: the next
 * batch of a run starts there.  A database without the table has none.
 */
int64
bucket_store_delete_expired(BucketTable which, TimestampTz now,
							int64 batch_size, ItemPointer position)
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

	if (!OidIsValid(store_tables[which].relid))
		return 0;
	execute_plan(&store_tables[which], PLAN_DELETE_EXPIRED, values, nulls);
	result = SPI_tuptable->vals[0];
	deleted = DatumGetInt64(SPI_getbinval(result, SPI_tuptable->tupdesc, 1,
										  &isnull));
	if (deleted > 0)
		*position = *(ItemPointer) DatumGetPointer(SPI_getbinval(result,
																 SPI_tuptable->tupdesc,
																 2, &isnull));
	SPI_finish();
	return deleted;
}
