/*
 * stats.c
 *		What the server counts in shared memory for operators: decisions by
 *		database, limiter and outcome (rl_stats, rl_stats_reset), and the
 *		cleanup worker's last run in each database (rl_cleanup_runs).
 *
 * The counters live in an open-addressing table of (database, limiter)
 * entries under one LWLock.  A decision takes the lock shared, finds its
 * entry and adds with an atomic increment, so deciding backends never wait
 * for one another; the lock is taken exclusively only to add an entry or to
 * reset a database.  The table holds at most ratelimit.stats_limiters named
 * entries, plus one per database that counts the decisions of the names
 * past that bound (and of names longer than STATS_NAME_LEN bytes) and
 * carries the database's last reset.  Counts are outside any transaction:
 * a rollback leaves them.
 *
 * Both need shared memory, which only a preloaded library can reserve;
 * without it decisions are not counted and reading the counts is an error.
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "ratelimit.h"

/* longest limiter name counted under its own name, in bytes */
#define STATS_NAME_LEN 128

/* databases with counters, and with a cleanup run, per server */
#define STATS_DATABASES 1000

typedef enum StatsOutcome
{
	OUTCOME_ALLOWED,
	OUTCOME_DENIED,
	OUTCOME_SHADOW_DENIED,
	NUM_OUTCOMES
} StatsOutcome;

typedef struct StatsEntry
{
	Oid			dboid;			/* InvalidOid: free */
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
	TimestampTz started;		/* since, for a database never reset */
	CleanupRun	runs[STATS_DATABASES];
	StatsEntry	entries[FLEXIBLE_ARRAY_MEMBER];
} Stats;

int			ratelimit_stats_limiters = 1000;
bool		ratelimit_stats = true;

static Stats *stats = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Slots: a power of two, at least twice the entries, so probes stay short. */
static uint32
slot_count(void)
{
	uint32		slots = 16;

	while (slots < 2 * ((uint32) ratelimit_stats_limiters + STATS_DATABASES))
		slots <<= 1;
	return slots;
}

static Size
stats_size(void)
{
	return add_size(offsetof(Stats, entries),
					mul_size(slot_count(), sizeof(StatsEntry)));
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
		for (i = 0; i < slots; i++)
			for (o = 0; o < NUM_OUTCOMES; o++)
				pg_atomic_init_u64(&stats->entries[i].counts[o], 0);
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
 * The slot of (dboid, name), or the free slot where it belongs; -1 when
 * neither (never, while entries are at most half the slots).
 */
static int
probe(Oid dboid, const char *name, int name_len, uint32 hash)
{
	uint32		i;

	for (i = 0; i <= stats->mask; i++)
	{
		uint32		slot = (hash + i) & stats->mask;
		StatsEntry *e = &stats->entries[slot];

		if (e->dboid == InvalidOid ||
			(e->dboid == dboid && e->hash == hash && e->name_len == name_len &&
			 memcmp(e->name, name, name_len) == 0))
			return (int) slot;
	}
	return -1;
}

static uint32
entry_hash(Oid dboid, const char *name, int name_len)
{
	return hash_combine(hash_bytes_uint32(dboid),
						hash_bytes((const unsigned char *) name, name_len));
}

/* Fill a free slot; the lock is held exclusively. */
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
	if (name_len > 0)
		stats->names++;
	else
		stats->databases++;
}

/*
 * The entry to count a decision of name in this database under: its own,
 * or the database's NULL limiter past the bound; NULL past the bound on
 * databases.  The lock is held exclusively.
 */
static StatsEntry *
add_entry(const char *name, int name_len, uint32 hash)
{
	int			slot = probe(MyDatabaseId, name, name_len, hash);

	if (slot >= 0 && stats->entries[slot].dboid == InvalidOid)
	{
		if (name_len > 0 && stats->names >= ratelimit_stats_limiters)
			return NULL;
		if (name_len == 0 && stats->databases >= STATS_DATABASES)
			return NULL;
		fill(slot, MyDatabaseId, name, name_len, hash, stats->started);
	}
	return slot >= 0 ? &stats->entries[slot] : NULL;
}

static void
count(const char *name, int name_len, StatsOutcome outcome)
{
	uint32		hash;
	int			slot;
	StatsEntry *e;

	if (name_len > STATS_NAME_LEN)
		name_len = 0;
	hash = entry_hash(MyDatabaseId, name, name_len);

	LWLockAcquire(&stats->lock, LW_SHARED);
	slot = probe(MyDatabaseId, name, name_len, hash);
	if (slot >= 0 && stats->entries[slot].dboid != InvalidOid)
	{
		pg_atomic_fetch_add_u64(&stats->entries[slot].counts[outcome], 1);
		LWLockRelease(&stats->lock);
		return;
	}
	LWLockRelease(&stats->lock);

	/* a first decision of this name here: add it, or count it under NULL */
	LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
	e = add_entry(name, name_len, hash);
	if (e == NULL && name_len > 0)
		e = add_entry("", 0, entry_hash(MyDatabaseId, "", 0));
	if (e != NULL)
		pg_atomic_fetch_add_u64(&e->counts[outcome], 1);
	LWLockRelease(&stats->lock);
}

static StatsOutcome
outcome_of(const GcraDecision *d, bool shadow)
{
	if (d->allowed)
		return OUTCOME_ALLOWED;
	return shadow ? OUTCOME_SHADOW_DENIED : OUTCOME_DENIED;
}

/*
 * Count a decision of limiter: allowed (a peek always is), denied, or a
 * shadow policy's would-be denial.  Nothing without preloading.
 */
void
stats_count(text *limiter, const GcraDecision *d, bool shadow)
{
	if (stats == NULL || !ratelimit_stats)
		return;
	count(VARDATA_ANY(limiter), VARSIZE_ANY_EXHDR(limiter), outcome_of(d, shadow));
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
 * Rebuild the table without this database's entries, with a fresh NULL
 * limiter carrying the time of the reset.  The lock is held exclusively:
 * no count is in progress.
 */
static void
reset_database(TimestampTz now)
{
	uint32		slots = stats->mask + 1;
	StatsEntry *kept = palloc(slots * sizeof(StatsEntry));
	uint64	   *counts = palloc(slots * NUM_OUTCOMES * sizeof(uint64));
	StatsEntry *e;
	int			nkept = 0;
	uint32		i;
	int			k;
	int			o;

	for (i = 0; i < slots; i++)
	{
		e = &stats->entries[i];
		if (e->dboid != InvalidOid && e->dboid != MyDatabaseId)
		{
			memcpy(&kept[nkept], e, sizeof(StatsEntry));
			for (o = 0; o < NUM_OUTCOMES; o++)
				counts[nkept * NUM_OUTCOMES + o] = pg_atomic_read_u64(&e->counts[o]);
			nkept++;
		}
		e->dboid = InvalidOid;
	}
	stats->names = 0;
	stats->databases = 0;
	for (k = 0; k < nkept; k++)
	{
		int			slot;

		e = &kept[k];
		slot = probe(e->dboid, e->name, e->name_len, e->hash);
		fill(slot, e->dboid, e->name, e->name_len, e->hash, e->since);
		for (o = 0; o < NUM_OUTCOMES; o++)
			pg_atomic_write_u64(&stats->entries[slot].counts[o],
								counts[k * NUM_OUTCOMES + o]);
	}
	e = add_entry("", 0, entry_hash(MyDatabaseId, "", 0));
	if (e != NULL)
		e->since = now;
	pfree(kept);
	pfree(counts);
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
	since = null_slot >= 0 && stats->entries[null_slot].dboid != InvalidOid ?
		stats->entries[null_slot].since : stats->started;
	for (i = 0; i <= stats->mask; i++)
	{
		StatsEntry *e = &stats->entries[i];
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		int			o;

		if (e->dboid != MyDatabaseId)
			continue;
		if (e->name_len > 0)
			values[0] = PointerGetDatum(cstring_to_text_with_len(e->name, e->name_len));
		else
			nulls[0] = true;
		for (o = 0; o < NUM_OUTCOMES; o++)
			values[1 + o] = Int64GetDatum((int64) pg_atomic_read_u64(&e->counts[o]));
		values[4] = TimestampTzGetDatum(since);
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
	LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
	reset_database(GetCurrentTimestamp());
	LWLockRelease(&stats->lock);
	PG_RETURN_VOID();
}

/* The cleanup worker records its run in this database. */
void
stats_record_cleanup(TimestampTz started, int64 deleted)
{
	CleanupRun *run = NULL;
	int			i;

	if (stats == NULL)
		return;
	LWLockAcquire(&stats->lock, LW_EXCLUSIVE);
	for (i = 0; i < STATS_DATABASES && run == NULL; i++)
		if (stats->runs[i].dboid == MyDatabaseId)
			run = &stats->runs[i];
	for (i = 0; i < STATS_DATABASES && run == NULL; i++)
		if (stats->runs[i].dboid == InvalidOid)
			run = &stats->runs[i];
	if (run != NULL)
	{
		run->dboid = MyDatabaseId;
		run->started = started;
		run->finished = GetCurrentTimestamp();
		run->deleted = deleted;
	}
	LWLockRelease(&stats->lock);
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
