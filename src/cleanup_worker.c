/*
 * cleanup_worker.c
 *		The background worker that deletes expired buckets in every database
 *		that has the extension, every ratelimit.cleanup_interval.
 *
 * A launcher, connected to no database, reads pg_database and starts one
 * worker per database in turn, waiting for each to end.  A worker looks for
 * the extension in its database (none: it leaves quietly) and deletes the
 * expired buckets of both tables (rl_buckets, then rl_buckets_durable) in
 * batches of ratelimit.cleanup_batch_size through
 * bucket_store_delete_expired, the routine rl_cleanup() uses, each batch in
 * its own short transaction: no long snapshot, few row locks at a time, and
 * a bucket that a concurrent decision has just moved into the future stays.
 *
 * With the memory store, the launcher walks the store once per round for
 * every database before it starts the workers: it frees the passed buckets
 * (counted for each database's worker to report) and those of databases
 * that no longer exist; a database closed to connections or a template keeps
 * its buckets.  Slots of a dropped installation of the extension are reused
 * by new keys at once, and freed when their bucket passes (or at once by
 * rl_cleanup() in that database).
 *
 * Registered only from shared_preload_libraries.  The launcher starts once
 * recovery has ended: a standby's unlogged buckets are unreadable, and a
 * promoted standby starts cleaning by itself.
 */
#include "postgres.h"

#include <limits.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/bgworker_internals.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pg_compat.h"
#include "ratelimit.h"

/* backend_type in pg_stat_activity */
#define LAUNCHER_TYPE "ratelimit cleanup launcher"
#define WORKER_TYPE "ratelimit cleanup"

/* seconds before the postmaster restarts a launcher that failed */
#define LAUNCHER_RESTART_SECONDS 10

/* databases created or dropped during a round's memory walk, at most */
#define MAX_UNKNOWN_DATABASES 64

PGDLLEXPORT void ratelimit_cleanup_launcher_main(Datum main_arg);
PGDLLEXPORT void ratelimit_cleanup_worker_main(Datum main_arg);

/* the worker the launcher is waiting for, stopped with the launcher */
static BackgroundWorkerHandle *running_worker = NULL;

static void
fill_worker(BackgroundWorker *worker, const char *function, const char *type)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	strlcpy(worker->bgw_library_name, "ratelimit", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker->bgw_name, type, BGW_MAXLEN);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
}

static int
registered_workers(void)
{
	RlWorkerListIter iter;
	int			count = 0;

	rl_foreach_registered_worker(iter)
		count++;
	return count;
}

/*
 * Register the launcher; called from _PG_init while preloading.  When no
 * slot is left, PostgreSQL logs "too many background workers" without
 * naming the worker: say which one, and what it means.
 */
void
cleanup_worker_register(void)
{
	BackgroundWorker worker;
	int			before = registered_workers();

	fill_worker(&worker, "ratelimit_cleanup_launcher_main", LAUNCHER_TYPE);
	worker.bgw_restart_time = LAUNCHER_RESTART_SECONDS;
	RegisterBackgroundWorker(&worker);
	if (registered_workers() == before)
		ereport(LOG,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("ratelimit cleanup worker will not run: max_worker_processes (%d) leaves no slot for its launcher",
						max_worker_processes),
				 errdetail("Expired buckets are deleted only by rl_cleanup() until the server restarts with more slots."),
				 errhint("Raise max_worker_processes by 2: one slot for the launcher, one for the worker it starts.")));
}

static void
reload_settings_if_asked(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

/*
 * Read pg_database: every database that exists into *existing, and those a
 * worker can connect to, templates excepted, into *cleanable.
 */
static void
list_databases(MemoryContext context, List **existing, List **cleanable)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	MemoryContext old;

	*existing = NIL;
	*cleanable = NIL;
	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	old = MemoryContextSwitchTo(context);
	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);

		*existing = lappend_oid(*existing, db->oid);
		if (db->datallowconn && !db->datistemplate &&
			!database_is_invalid_form(db))
			*cleanable = lappend_oid(*cleanable, db->oid);
	}
	MemoryContextSwitchTo(old);
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
}

/*
 * The memory store's part of a round, one walk over the store for every
 * database: free the passed buckets, and those of dropped databases.  In
 * context, *databases are the databases that exist, sorted, and (*freed)[i]
 * the passed buckets freed of (*databases)[i]; answers how many exist.
 */
static int
clean_memory(MemoryContext context, List *existing, Oid **databases,
			 int64 **freed)
{
	Oid			unknown[MAX_UNKNOWN_DATABASES];
	Oid			gone[MAX_UNKNOWN_DATABASES];
	int			nunknown;
	int			ngone = 0;
	int			n = 0;
	int			i;
	ListCell   *lc;

	*databases = MemoryContextAlloc(context, list_length(existing) * sizeof(Oid));
	*freed = MemoryContextAllocZero(context, list_length(existing) * sizeof(int64));
	foreach(lc, existing)
		(*databases)[n++] = lfirst_oid(lc);
	qsort(*databases, n, sizeof(Oid), oid_cmp);
	nunknown = memory_store_cleanup_round(GetCurrentTimestamp(), *databases, n,
										  *freed, unknown,
										  MAX_UNKNOWN_DATABASES);

	/*
	 * A database with live buckets that was not listed was dropped since, or
	 * created since: only one that is gone now loses its buckets.
	 */
	if (nunknown > 0)
	{
		StartTransactionCommand();
		for (i = 0; i < nunknown; i++)
			if (!SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(unknown[i])))
				gone[ngone++] = unknown[i];
		CommitTransactionCommand();
		memory_store_forget_databases(gone, ngone);
	}
	return n;
}

/*
 * Run one worker on database dboid and wait until it ends; freed is how many
 * of its memory buckets the round freed, for the worker to report.
 */
static void
clean_database(Oid dboid, int64 freed)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	bool		exists;

	/* a database dropped since the round began would fail the connection */
	StartTransactionCommand();
	exists = SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dboid));
	CommitTransactionCommand();
	if (!exists)
		return;

	fill_worker(&worker, "ratelimit_cleanup_worker_main", WORKER_TYPE);
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_main_arg = ObjectIdGetDatum(dboid);
	memcpy(worker.bgw_extra, &freed, sizeof(freed));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start the ratelimit cleanup of database %u", dboid),
				 errdetail("No background worker slot is free."),
				 errhint("Raise max_worker_processes.")));
		return;
	}
	running_worker = handle;
	if (WaitForBackgroundWorkerShutdown(handle) == BGWH_POSTMASTER_DIED)
		proc_exit(1);
	running_worker = NULL;
	pfree(handle);
}

/* A launcher that is stopped stops the worker it started. */
static void
stop_running_worker(int code, Datum arg)
{
	if (running_worker != NULL)
		TerminateBackgroundWorker(running_worker);
}

void
ratelimit_cleanup_launcher_main(Datum main_arg)
{
	MemoryContext round_context;
	TimestampTz last_round;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* no database: only the shared catalogs, pg_database among them */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	before_shmem_exit(stop_running_worker, (Datum) 0);

	round_context = AllocSetContextCreate(TopMemoryContext,
										  "ratelimit cleanup round",
										  ALLOCSET_DEFAULT_SIZES);

	/* the first round comes one interval after the server starts */
	last_round = GetCurrentTimestamp();
	for (;;)
	{
		int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;
		long		timeout = -1;

		CHECK_FOR_INTERRUPTS();
		reload_settings_if_asked();

		/*
		 * The next round is computed afresh after every wake-up, so a reload
		 * that shortens the interval takes effect at once.
		 */
		if (ratelimit_cleanup_interval > 0)
		{
			TimestampTz now = GetCurrentTimestamp();
			TimestampTz next = last_round +
				(int64) ratelimit_cleanup_interval * USECS_PER_SEC;

			if (now >= next)
			{
				List	   *existing;
				List	   *cleanable;
				Oid		   *databases;
				int64	   *freed;
				int			ndatabases;
				ListCell   *lc;

				last_round = now;
				pgstat_report_activity(STATE_RUNNING, "cleaning every database");
				MemoryContextReset(round_context);
				list_databases(round_context, &existing, &cleanable);

				/*
				 * Only a dropped database loses its memory buckets: not one
				 * closed to connections, nor a template.
				 */
				ndatabases = clean_memory(round_context, existing, &databases,
										  &freed);
				foreach(lc, cleanable)
				{
					Oid			dboid = lfirst_oid(lc);
					Oid		   *listed = bsearch(&dboid, databases, ndatabases,
												 sizeof(Oid), oid_cmp);

					CHECK_FOR_INTERRUPTS();
					clean_database(dboid, freed[listed - databases]);
				}
				continue;
			}
			events |= WL_TIMEOUT;
			/* WaitLatch takes at most INT_MAX milliseconds */
			timeout = Min(TimestampDifferenceMilliseconds(now, next), INT_MAX);
		}

		pgstat_report_activity(STATE_IDLE, NULL);
		(void) WaitLatch(MyLatch, events, timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* Where the extension's table lives and who owns it, if it is installed. */
static bool
find_extension(Oid *namespace, Oid *owner)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("ratelimit"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	found = HeapTupleIsValid(tuple);
	if (found)
	{
		Form_pg_extension ext = (Form_pg_extension) GETSTRUCT(tuple);

		*namespace = ext->extnamespace;
		*owner = ext->extowner;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Lock rl_buckets for the batch, then make sure it still exists: a DROP
 * EXTENSION that was waiting for the previous batch to end goes first.
 */
static bool
lock_buckets(Oid namespace)
{
	Oid			relid = get_relname_relid("rl_buckets", namespace);

	if (!OidIsValid(relid))
		return false;
	LockRelationOid(relid, RowExclusiveLock);
	return SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid));
}

/*
 * Delete one batch of buckets that expired before cutoff, in a transaction
 * of its own with a fresh snapshot.  Answers -1 when the extension is not
 * (or no longer) installed, so a DROP EXTENSION during a run ends it
 * quietly.
 */
static int64
delete_batch(BucketTable table, TimestampTz cutoff, ItemPointer position,
			 int64 deleted_so_far)
{
	Oid			namespace;
	Oid			owner;
	int64		deleted = -1;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (find_extension(&namespace, &owner) && lock_buckets(namespace))
	{
		pgstat_report_activity(STATE_RUNNING,
							   psprintf("deleting expired buckets in batches of %d: %lld deleted so far",
										ratelimit_cleanup_batch_size,
										(long long) deleted_so_far));
		bucket_store_connect_to(namespace, owner);
		deleted = bucket_store_delete_expired(table, cutoff,
											  ratelimit_cleanup_batch_size,
											  position);
		bucket_store_disconnect();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	return deleted;
}

void
ratelimit_cleanup_worker_main(Datum main_arg)
{
	TimestampTz start;
	ItemPointerData position;
	int64		deleted;
	int64		batch = 0;
	int			table;
	char	   *dbname;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg),
											  InvalidOid, 0);

	/*
	 * Like autovacuum, whatever the configuration says: a batch must see
	 * rows that rl_take moved meanwhile and recheck them, not fail on them.
	 */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);

	StartTransactionCommand();
	dbname = MemoryContextStrdup(TopMemoryContext,
								 get_database_name(MyDatabaseId));
	CommitTransactionCommand();

	/*
	 * Only buckets that expired before the run began: the run ends even when
	 * decisions keep expiring buckets behind it.  It ends when a batch finds
	 * nothing; a batch deletes fewer than its size also when decisions have
	 * moved some of its buckets into the future meanwhile.
	 */
	start = GetCurrentTimestamp();
	/* the memory buckets the launcher's round freed here count too */
	memcpy(&deleted, MyBgworkerEntry->bgw_extra, sizeof(deleted));
	for (table = 0; table < NUM_BUCKET_TABLES && batch >= 0; table++)
	{
		ItemPointerSet(&position, 0, 0);
		do
		{
			CHECK_FOR_INTERRUPTS();
			reload_settings_if_asked();
			batch = delete_batch(table, start, &position, deleted);
			deleted += Max(batch, 0);
		} while (batch > 0);
	}
	/* not installed here, or dropped during the run */
	if (batch < 0 && deleted == 0)
	{
		ereport(DEBUG1,
				(errmsg("ratelimit cleanup skipped database \"%s\": the extension is not installed",
						dbname)));
		return;
	}
	/* in a transaction: a full table of runs reads which databases are gone */
	StartTransactionCommand();
	stats_record_cleanup(start, deleted);
	CommitTransactionCommand();

	ereport(deleted > 0 ? LOG : DEBUG1,
			(errmsg_plural("ratelimit cleanup deleted %lld expired bucket in database \"%s\" in %.3f s",
						   "ratelimit cleanup deleted %lld expired buckets in database \"%s\" in %.3f s",
						   deleted, (long long) deleted, dbname,
						   (double) (GetCurrentTimestamp() - start) / USECS_PER_SEC)));
}
