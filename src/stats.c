/*
 * stats.c
 *		What the server counts in shared memory for operators: decisions by
 *		database, limiter and outcome (rl_stats, rl_stats_reset), and the
 *		cleanup worker's last run in each database (rl_cleanup_runs).
 *
 * The counters live in an open-addressing table of (database, limiter)
 * entries.  The table holds at most ratelimit.stats_limiters named entries,
 * plus one per database that counts the decisions of the names past that
 * bound (and of names longer than STATS_NAME_LEN bytes) and carries the
 * database's last reset.  Counts are outside any transaction: a rollback
 * leaves them.
 *
 * A decision takes no lock that other backends take: each backend keeps the
 * entries it has counted in a local cache and adds to their atomics under
 * its own counting lock, which only a removal of entries ever waits for.
 * The table's lock is taken to find or add an entry the cache does not
 * hold, and exclusively to add or remove entries.  Entries never move while
 * they are in use: a removed entry is retired (its slot stays reserved and
 * probes pass over it) and the generation is advanced, so every cache is
 * dropped at its next use; once every counting lock has been taken and
 * released, no count can still reach a retired entry and its slot may hold
 * another.  Entries of databases that no longer exist are freed when the
 * table is full, at most once a second (nobody counts in a dropped
 * database, so they need no wait): a new database counts under its own
 * names.
 *
 * Both need shared memory, which only a preloaded library can reserve;
 * without it decisions are not counted and reading the counts is an error.
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "lib/qunique.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "ratelimit.h"

/* longest limiter name counted under its own name, in bytes */
#define STATS_NAME_LEN 128

/* databases with counters, and with a cleanup run, per server */
#define STATS_DATABASES 1000

/* entries a backend keeps found (a power of two) */
#define CACHE_ENTRIES 64

/* how often a full table looks for entries of dropped databases */
#define FORGET_INTERVAL USECS_PER_SEC

/* what is counted: a decision's outcome, and beside it a lockout it started */
typedef enum StatsOutcome
{
	OUTCOME_ALLOWED,
	OUTCOME_DENIED,
	OUTCOME_SHADOW_DENIED,
	OUTCOME_LOCKOUT,
	NUM_OUTCOMES
} StatsOutcome;

typedef enum EntryState
{
	ENTRY_FREE,					/* never used: ends a probe */
	ENTRY_USED,
	ENTRY_RETIRED,				/* removed; a cache may still point to it */
	ENTRY_REUSABLE				/* removed, and no cache points to it */
} EntryState;

typedef struct StatsEntry
{
	EntryState	state;
	Oid			dboid;
	int			name_len;		/* 0: the database's NULL limiter */
	uint32		hash;
	TimestampTz since;			/* NULL limiter only: the last reset */
	pg_atomic_uint64 counts[NUM_OUTCOMES];
	char		name[STATS_NAME_LEN];
} StatsEntry;

typedef struct CleanupRun
{
	Oid			dboid;			/* InvalidOid: free */
	TimestampTz started;
	TimestampTz finished;
	int64		deleted;
} CleanupRun;

typedef struct Stats
{
	LWLock		lock;
	int			tranche_id;
	int			names;			/* named entries in use */
	int			databases;		/* NULL-limiter entries in use */
	uint32		mask;			/* slots - 1, a power of two less one */
	pg_atomic_uint64 generation;	/* advanced when entries are removed */
	TimestampTz started;		/* since, for a database never reset */
	TimestampTz last_forget;	/* the last look for dropped databases */
	CleanupRun	runs[STATS_DATABASES];
	StatsEntry	entries[FLEXIBLE_ARRAY_MEMBER];
} Stats;

/* what a backend knows of the entries of its database */
typedef struct CachedEntry
{
	StatsEntry *entry;			/* NULL: empty */
	uint32		hash;
	int			name_len;
	char		name[STATS_NAME_LEN];
} CachedEntry;

int			ratelimit_stats_limiters = 1000;
bool		ratelimit_stats = true;

static Stats *stats = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static CachedEntry cache[CACHE_ENTRIES];
static uint64 cache_generation = 0;
static LWLock *my_counting_lock = NULL;
static bool my_counting_lock_known = false;

/* Slots: a power of two, at least twice the entries, so probes stay short. */
static uint32
slot_count(void)
{
	uint32		slots = 16;

	while (slots < 2 * ((uint32) ratelimit_stats_limiters + STATS_DATABASES))
		slots <<= 1;
	return slots;
}

/* every process that may count has a PGPROC: backends, workers, prepared */
static int
counting_lock_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
entries_size(void)
{
	return add_size(offsetof(Stats, entries),
					mul_size(slot_count(), sizeof(StatsEntry)));
}

/* the counting locks, after the entries, one per cache line */
static LWLockPadded *
counting_locks(void)
{
	return (LWLockPadded *) TYPEALIGN(PG_CACHE_LINE_SIZE,
									  (char *) stats + entries_size());
}

static Size
stats_size(void)
{
	return add_size(add_size(entries_size(), PG_CACHE_LINE_SIZE),
					mul_size(counting_lock_count(), sizeof(LWLockPadded)));
}

static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(stats_size());
}

static void
stats_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stats = ShmemInitStruct("ratelimit stats", stats_size(), &found);
	if (!found)
	{
		uint32		slots = slot_count();
		uint32		i;
		int			o;

		memset(stats, 0, stats_size());
		stats->tranche_id = LWLockNewTrancheId();
		LWLockInitialize(&stats->lock, stats->tranche_id);
		stats->mask = slots - 1;
		stats->started = GetCurrentTimestamp();
		pg_atomic_init_u64(&stats->generation, 1);
		for (i = 0; i < slots; i++)
			for (o = 0; o < NUM_OUTCOMES; o++)
				pg_atomic_init_u64(&stats->entries[i].counts[o], 0);
		for (i = 0; i < counting_lock_count(); i++)
			LWLockInitialize(&counting_locks()[i].lock, stats->tranche_id);
	}
	LWLockRelease(AddinShmemInitLock);
	LWLockRegisterTranche(stats->tranche_id, "ratelimit stats");
}

void
stats_define_settings(void)
{
	GucContext	context = process_shared_preload_libraries_in_progress ?
		PGC_POSTMASTER : PGC_SIGHUP;

	DefineCustomIntVariable("ratelimit.stats_limiters",
							"Limiter names rl_stats counts separately, for all databases of the server.",
							"Decisions of further names are counted under a NULL limiter. Needs ratelimit in shared_preload_libraries.",
							&ratelimit_stats_limiters,
							1000,
							0, 100000,
							context,
							0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("ratelimit.stats",
							 "Counts decisions for rl_stats.",
							 "Off only to measure what counting costs.",
							 &ratelimit_stats,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
}

void
stats_register(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

static void
require_stats(void)
{
	if (stats == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit statistics need ratelimit in shared_preload_libraries"),
				 errdetail("The counters live in shared memory, which only a preloaded library can reserve."),
				 errhint("Add ratelimit to shared_preload_libraries and restart.")));
}

/*
 * The slot of (dboid, name), or else the slot where it would go (the first
 * reusable one on its probe, or the free one that ends it); -1 when neither.
 */
static int
probe(Oid dboid, const char *name, int name_len, uint32 hash)
{
	int			place = -1;
	uint32		i;

	for (i = 0; i <= stats->mask; i++)
	{
		uint32		slot = (hash + i) & stats->mask;
		StatsEntry *e = &stats->entries[slot];

		if (e->state == ENTRY_FREE)
			return place >= 0 ? place : (int) slot;
		if (e->state == ENTRY_USED && e->dboid == dboid && e->hash == hash &&
			e->name_len == name_len && memcmp(e->name, name, name_len) == 0)
			return (int) slot;
		if (e->state == ENTRY_REUSABLE && place < 0)
			place = (int) slot;
	}
	return place;
}

static uint32
entry_hash(Oid dboid, const char *name, int name_len)
{
	return hash_combine(hash_bytes_uint32(dboid),
						hash_bytes((const unsigned char *) name, name_len));
}

/* Fill a slot that is not in use; the lock is held exclusively. */
static void
fill(int slot, Oid dboid, const char *name, int name_len, uint32 hash,
	 TimestampTz since)
{
	StatsEntry *e = &stats->entries[slot];
	int			o;

	e->hash = hash;
	e->name_len = name_len;
	memcpy(e->name, name, name_len);
	e->since = since;
	for (o = 0; o < NUM_OUTCOMES; o++)
		pg_atomic_write_u64(&e->counts[o], 0);
	e->dboid = dboid;
	e->state = ENTRY_USED;
	if (name_len > 0)
		stats->names++;
	else
		stats->databases++;
}

/* Take an entry out of use; the lock is held exclusively. */
static void
remove_entry(StatsEntry *e, EntryState state)
{
	e->state = state;
	if (e->name_len > 0)
		stats->names--;
	else
		stats->databases--;
}

/*
 * Whether (dboid, name) may get an entry of its own: under the bounds, and
 * a place on its probe.  The lock is held.
 */
static bool
room_for(int slot, int name_len)
{
	if (slot < 0)
		return false;
	if (name_len > 0)
		return stats->names < ratelimit_stats_limiters;
	return stats->databases < STATS_DATABASES;
}

/*
 * Free the entries and cleanup runs of databases that no longer exist;
 * answers whether there were any.  No backend counts in a dropped database,
 * so no cache points to its entries and their slots are reusable at once.
 * The catalog is read with no lock of ours held.
 */
static bool
forget_dropped_databases(void)
{
	Oid		   *dboids;
	int			n = 0;
	int			ndropped = 0;
	uint32		i;
	int			k;

	Assert(IsTransactionState());
	dboids = palloc((stats->mask + 1 + STATS_DATABASES) * sizeof(Oid));
	LWLockAcquire(&stats->lock, LW_SHARED);
	for (i = 0; i <= stats->mask; i++)
		if (stats->entries[i].state == ENTRY_USED)
			dboids[n++] = stats->entries[i].dboid;
	for (k = 0; k < STATS_DATABASES; k++)
		if (stats->runs[k].dboid != InvalidOid)
			dboids[n++] = stats->runs[k].dboid;
	LWLockRelease(&stats->lock);

	/* each database once, however many names it counts */
	qsort(dboids, n, sizeof(Oid), oid_cmp);
	n = qunique(dboids, n, sizeof(Oid), oid_cmp);

	/*
	 * A database created since this transaction last looked at the catalog
	 * is not dropped: read pg_database as it is now.
	 */
	AcceptInvalidationMessages();
	InvalidateCatalogSnapshot();
	for (k = 0; k < n; k++)
		if (!SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dboids[k])))
			dboids[ndropped++] = dboids[k];

	if (ndropped > 0)
	{
		LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
		for (i = 0; i <= stats->mask; i++)
		{
			StatsEntry *e = &stats->entries[i];

			for (k = 0; k < ndropped && e->state == ENTRY_USED; k++)
				if (e->dboid == dboids[k])
					remove_entry(e, ENTRY_REUSABLE);
		}
		for (i = 0; i < STATS_DATABASES; i++)
			for (k = 0; k < ndropped; k++)
				if (stats->runs[i].dboid == dboids[k])
					stats->runs[i].dboid = InvalidOid;
		LWLockRelease(&stats->lock);
	}
	pfree(dboids);
	return ndropped > 0;
}

/*
 * The entry of name in this database, added when there is room; NULL past
 * the bound.  The lock is held exclusively.
 */
static StatsEntry *
add_entry(const char *name, int name_len, uint32 hash)
{
	int			slot = probe(MyDatabaseId, name, name_len, hash);

	if (slot >= 0 && stats->entries[slot].state == ENTRY_USED)
		return &stats->entries[slot];
	if (!room_for(slot, name_len))
		return NULL;
	fill(slot, MyDatabaseId, name, name_len, hash, stats->started);
	return &stats->entries[slot];
}

/*
 * Whether to look for dropped databases now, the table being full: at most
 * once per FORGET_INTERVAL, so that names past the bound do not read the
 * catalog on every decision.  The lock is held exclusively.
 */
static bool
forget_due(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now - stats->last_forget < FORGET_INTERVAL)
		return false;
	stats->last_forget = now;
	return true;
}

/*
 * Count under e and keep it in the cache slot c; the table's lock is held,
 * so no removal runs and the generation read now is the one e is live in.
 */
static void
count_and_cache(StatsEntry *e, CachedEntry *c, const char *name, int name_len,
				uint32 hash, StatsOutcome outcome)
{
	uint64		generation = pg_atomic_read_u64(&stats->generation);

	pg_atomic_fetch_add_u64(&e->counts[outcome], 1);
	if (generation != cache_generation)
	{
		memset(cache, 0, sizeof(cache));
		cache_generation = generation;
	}
	c->entry = e;
	c->hash = hash;
	c->name_len = name_len;
	memcpy(c->name, name, name_len);
}

/* Count by the table, for a name the cache does not hold. */
static void
count_in_table(const char *name, int name_len, uint32 hash,
			   StatsOutcome outcome, CachedEntry *c)
{
	bool		forgot = false;
	int			slot;

	LWLockAcquire(&stats->lock, LW_SHARED);
	slot = probe(MyDatabaseId, name, name_len, hash);
	if (slot >= 0 && stats->entries[slot].state == ENTRY_USED)
	{
		count_and_cache(&stats->entries[slot], c, name, name_len, hash, outcome);
		LWLockRelease(&stats->lock);
		return;
	}
	LWLockRelease(&stats->lock);

	/* a first decision of this name here: add it, or count it under NULL */
	for (;;)
	{
		StatsEntry *e;

		LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
		e = add_entry(name, name_len, hash);
		if (e == NULL && !forgot && forget_due())
		{
			/* entries of dropped databases may be what fills the table */
			LWLockRelease(&stats->lock);
			(void) forget_dropped_databases();
			forgot = true;
			continue;
		}
		if (e == NULL && name_len > 0)
			e = add_entry("", 0, entry_hash(MyDatabaseId, "", 0));
		if (e != NULL)
			count_and_cache(e, c, name, name_len, hash, outcome);
		LWLockRelease(&stats->lock);
		return;
	}
}

/* This backend's counting lock; NULL for a process without a PGPROC slot. */
static LWLock *
counting_lock(void)
{
	if (!my_counting_lock_known)
	{
		int			index = MyProc != NULL && ProcGlobal != NULL ?
			(int) (MyProc - ProcGlobal->allProcs) : -1;

		if (index >= 0 && index < counting_lock_count())
			my_counting_lock = &counting_locks()[index].lock;
		my_counting_lock_known = true;
	}
	return my_counting_lock;
}

static void
count(const char *name, int name_len, StatsOutcome outcome)
{
	LWLock	   *lock = counting_lock();
	uint32		hash;
	CachedEntry *c;

	if (name_len > STATS_NAME_LEN)
		name_len = 0;
	hash = entry_hash(MyDatabaseId, name, name_len);
	c = &cache[hash & (CACHE_ENTRIES - 1)];

	if (lock != NULL)
	{
		bool		counted = false;

		LWLockAcquire(lock, LW_SHARED);
		if (pg_atomic_read_u64(&stats->generation) == cache_generation &&
			c->entry != NULL && c->hash == hash && c->name_len == name_len &&
			memcmp(c->name, name, name_len) == 0)
		{
			pg_atomic_fetch_add_u64(&c->entry->counts[outcome], 1);
			counted = true;
		}
		LWLockRelease(lock);
		if (counted)
			return;
	}
	count_in_table(name, name_len, hash, outcome, c);
}

static StatsOutcome
outcome_of(const GcraDecision *d, bool shadow)
{
	if (d->allowed)
		return OUTCOME_ALLOWED;
	return shadow ? OUTCOME_SHADOW_DENIED : OUTCOME_DENIED;
}

/*
 * Count a decision of limiter: allowed, denied, or a shadow policy's
 * would-be denial.  Its callers pass no peek: a peek decides nothing.
 * Nothing without preloading.
 */
void
stats_count(text *limiter, const GcraDecision *d, bool shadow)
{
	if (stats == NULL || !ratelimit_stats)
		return;
	count(VARDATA_ANY(limiter), VARSIZE_ANY_EXHDR(limiter), outcome_of(d, shadow));
	if (d->lock_started)		/* rare: a second count costs nothing */
		count(VARDATA_ANY(limiter), VARSIZE_ANY_EXHDR(limiter), OUTCOME_LOCKOUT);
}

/*
 * Count each limiter of an rl_take_all by its own verdict: the one that
 * denied the call as denied, the others as allowed; a peek (cost 0) not at
 * all, as in rl_take.
 */
void
stats_count_all(const Datum *limiters, const StoreRequest *requests,
				const GcraDecision *decisions, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (requests[i].cost > 0)	/* a peek is not a decision */
			stats_count(DatumGetTextPP(limiters[i]), &decisions[i],
						requests[i].shadow);
}

/*
 * Forget this database's counts and names: its entries are retired and a
 * fresh NULL limiter carries the time of the reset.  Once every counting
 * lock has been taken and released, no backend can still add to a retired
 * entry (each saw the new generation and dropped its cache), and their
 * slots become reusable.
 */
static void
reset_database(TimestampTz now)
{
	uint32		null_hash = entry_hash(MyDatabaseId, "", 0);
	uint32		i;
	int			slot;

	LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
	for (i = 0; i <= stats->mask; i++)
		if (stats->entries[i].state == ENTRY_USED &&
			stats->entries[i].dboid == MyDatabaseId)
			remove_entry(&stats->entries[i], ENTRY_RETIRED);
	pg_atomic_fetch_add_u64(&stats->generation, 1);
	slot = probe(MyDatabaseId, "", 0, null_hash);
	if (room_for(slot, 0))
		fill(slot, MyDatabaseId, "", 0, null_hash, now);
	LWLockRelease(&stats->lock);

	for (i = 0; i < counting_lock_count(); i++)
	{
		LWLockAcquire(&counting_locks()[i].lock, LW_EXCLUSIVE);
		LWLockRelease(&counting_locks()[i].lock);
	}

	LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
	for (i = 0; i <= stats->mask; i++)
		if (stats->entries[i].state == ENTRY_RETIRED)
			stats->entries[i].state = ENTRY_REUSABLE;
	LWLockRelease(&stats->lock);
}

PG_FUNCTION_INFO_V1(rl_stats_read);
PG_FUNCTION_INFO_V1(rl_stats_reset);
PG_FUNCTION_INFO_V1(rl_cleanup_runs);

/*
 * rl_stats_read(): this database's counts, one row per limiter (NULL: the
 * names past the bound), since its last reset.
 */
Datum
rl_stats_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz since;
	uint32		i;
	int			null_slot;

	require_stats();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(&stats->lock, LW_SHARED);
	null_slot = probe(MyDatabaseId, "", 0, entry_hash(MyDatabaseId, "", 0));
	since = null_slot >= 0 && stats->entries[null_slot].state == ENTRY_USED ?
		stats->entries[null_slot].since : stats->started;
	for (i = 0; i <= stats->mask; i++)
	{
		StatsEntry *e = &stats->entries[i];
		Datum		values[6];
		bool		nulls[6] = {false, false, false, false, false, false};
		int			o;

		if (e->state != ENTRY_USED || e->dboid != MyDatabaseId)
			continue;
		if (e->name_len > 0)
			values[0] = PointerGetDatum(cstring_to_text_with_len(e->name, e->name_len));
		else
			nulls[0] = true;
		for (o = OUTCOME_ALLOWED; o <= OUTCOME_SHADOW_DENIED; o++)
			values[1 + o] = Int64GetDatum((int64) pg_atomic_read_u64(&e->counts[o]));
		values[4] = TimestampTzGetDatum(since);
		/* 1.3's last column; a database still at 1.1 or 1.2 has five */
		values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&e->counts[OUTCOME_LOCKOUT]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(&stats->lock);
	return (Datum) 0;
}

/* rl_stats_reset(): forget this database's counts and names */
Datum
rl_stats_reset(PG_FUNCTION_ARGS)
{
	require_stats();
	reset_database(GetCurrentTimestamp());
	PG_RETURN_VOID();
}

/* The slot of this database's cleanup run, or a free one; the lock is held. */
static CleanupRun *
run_slot(void)
{
	int			i;

	for (i = 0; i < STATS_DATABASES; i++)
		if (stats->runs[i].dboid == MyDatabaseId)
			return &stats->runs[i];
	for (i = 0; i < STATS_DATABASES; i++)
		if (stats->runs[i].dboid == InvalidOid)
			return &stats->runs[i];
	return NULL;
}

/*
 * The cleanup worker records its run in this database, in a transaction;
 * when every slot is taken, runs of dropped databases make room.
 */
void
stats_record_cleanup(TimestampTz started, int64 deleted)
{
	CleanupRun *run;
	int			attempt;

	if (stats == NULL)
		return;
	for (attempt = 0; attempt < 2; attempt++)
	{
		LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
		run = run_slot();
		if (run != NULL)
		{
			run->dboid = MyDatabaseId;
			run->started = started;
			run->finished = GetCurrentTimestamp();
			run->deleted = deleted;
		}
		LWLockRelease(&stats->lock);
		if (run != NULL || !forget_dropped_databases())
			return;
	}
}

/*
 * rl_cleanup_runs(): the last run of the cleanup worker in each database
 * that still exists.
 */
Datum
rl_cleanup_runs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CleanupRun	runs[STATS_DATABASES];
	int			i;

	require_stats();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(&stats->lock, LW_SHARED);
	memcpy(runs, stats->runs, sizeof(runs));
	LWLockRelease(&stats->lock);

	for (i = 0; i < STATS_DATABASES; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};
		char	   *name;

		if (runs[i].dboid == InvalidOid)
			continue;
		name = get_database_name(runs[i].dboid);
		if (name == NULL)
			continue;
		values[0] = CStringGetTextDatum(name);
		values[1] = TimestampTzGetDatum(runs[i].started);
		values[2] = TimestampTzGetDatum(runs[i].finished);
		values[3] = Int64GetDatum(runs[i].deleted);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
