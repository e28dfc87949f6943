/*
 * memory_store.c
 *		The memory store (ratelimit.store = memory): buckets in a fixed-size
 *		table in shared memory, spilling to rl_buckets when it is full.
 *
 * The table is split into sets of SET_SLOTS slots, each under its own
 * LWLock; a key lives in the set its hash picks.  A decision on a key found
 * in memory takes that one lock: no row, no lock manager, no transaction id,
 * no WAL, and nothing a rollback could undo.
 *
 * A key's bucket lives in one place at a time.  A key that is not in memory
 * may have a row in rl_buckets: it spilled when its set was full, or it was
 * stored before the server switched stores.  So a miss, under its set's lock,
 * probes the table with a dirty snapshot, which also sees rows that other
 * transactions are still inserting; a row found there is where the key is
 * decided.  Otherwise the key takes a slot of its set that is free, holds a
 * bucket that has passed (the same as an absent one) or belongs to a dropped
 * installation of the extension; when there is none, its first bucket is
 * inserted into rl_buckets under the same lock, so that the next miss for the
 * key finds the row.  Table decisions made for this store never insert: when
 * the row is gone (cleanup deletes passed ones), the key comes back here.
 *
 * Slots carry the database and the OID of that database's rl_buckets, so one
 * database never answers another's keys and a dropped extension's buckets
 * are never found again; cleanup frees them.
 *
 * A clean shutdown saves the live buckets to SAVE_FILE in the data directory
 * and the next start loads them; after a crash or an immediate shutdown the
 * store starts empty, as the unlogged table does.
 */
#include "postgres.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/transam.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/file_perm.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "ratelimit.h"

/* slots per set: one lock, and the slots a key can use */
#define SET_SLOTS 16

#define SAVE_FILE "ratelimit_buckets"
#define SAVE_FILE_TMP SAVE_FILE ".tmp"
#define SAVE_MAGIC 0x524c4231	/* "RLB1" */
#define SAVE_VERSION 1

typedef struct MemorySlot
{
	Oid			dboid;			/* InvalidOid: free */
	Oid			store_relid;	/* that database's rl_buckets */
	int64		tat_us;
	int64		interval_us;	/* the T it was last written with */
	uint8		key[BUCKET_KEY_LEN];
} MemorySlot;

typedef struct MemorySet
{
	LWLock		lock;
	MemorySlot	slots[SET_SLOTS];
} MemorySet;

typedef struct MemoryStore
{
	int			tranche_id;
	int			nsets;
	MemorySet	sets[FLEXIBLE_ARRAY_MEMBER];
} MemoryStore;

/* The save file: this header, count slots, and a CRC-32C of both. */
typedef struct SaveHeader
{
	uint32		magic;
	uint32		version;
	uint64		system_identifier;	/* a file of another cluster is refused */
	uint32		slot_size;
	uint32		set_slots;
	uint64		count;
} SaveHeader;

int			ratelimit_store = STORE_TABLE;
int			ratelimit_memory_buckets = 100000;

static const struct config_enum_entry store_options[] = {
	{"table", STORE_TABLE, false},
	{"memory", STORE_MEMORY, false},
	{NULL, 0, false}
};

static MemoryStore *memory = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static int
set_count(void)
{
	return (ratelimit_memory_buckets + SET_SLOTS - 1) / SET_SLOTS;
}

static Size
memory_size(void)
{
	return add_size(offsetof(MemoryStore, sets),
					mul_size(set_count(), sizeof(MemorySet)));
}

/* The set a key lives in: the digest is uniform already. */
static MemorySet *
set_of(const uint8 *key, Oid dboid)
{
	uint64		hash;

	memcpy(&hash, key, sizeof(hash));
	hash ^= (uint64) dboid * UINT64CONST(0x9e3779b97f4a7c15);
	return &memory->sets[hash % memory->nsets];
}

static MemorySlot *
find_slot(MemorySet *set, const uint8 *key, Oid store_relid)
{
	int			i;

	for (i = 0; i < SET_SLOTS; i++)
	{
		MemorySlot *slot = &set->slots[i];

		if (slot->dboid == MyDatabaseId && slot->store_relid == store_relid &&
			memcmp(slot->key, key, BUCKET_KEY_LEN) == 0)
			return slot;
	}
	return NULL;
}

/*
 * Whether a new key may take slot: free, holding a bucket that has passed,
 * or left by a dropped installation of the extension in this database.
 * Passed (passed_before) by the server clock too: a call of rl_take_at in the future must not
 * take the slot of a bucket that is live for everybody else (the table store
 * keeps such a row until cleanup, which goes by the server clock).
 */
static inline int64
passed_before(int64 now)
{
	return Min(now, GetCurrentTimestamp());
}

static inline bool
slot_reusable(const MemorySlot *slot, Oid store_relid, int64 passed)
{
	return slot->dboid == InvalidOid || slot->tat_us < passed ||
		(slot->dboid == MyDatabaseId && slot->store_relid != store_relid);
}

/*
 * A free slot first: a passed bucket is the same as an absent one, but it is
 * found again without a miss (and its probe of rl_buckets) while it stays.
 */
static MemorySlot *
reusable_slot(MemorySet *set, Oid store_relid, int64 now)
{
	int64		passed = passed_before(now);
	MemorySlot *reusable = NULL;
	int			i;

	for (i = 0; i < SET_SLOTS; i++)
	{
		if (set->slots[i].dboid == InvalidOid)
			return &set->slots[i];
		if (reusable == NULL && slot_reusable(&set->slots[i], store_relid, passed))
			reusable = &set->slots[i];
	}
	return reusable;
}

static GcraDecision
decide_in_slot(MemorySlot *slot, const GcraLimit *limit, int64 now, int32 cost)
{
	GcraBucket	bucket = {true, slot->tat_us, slot->interval_us};
	GcraDecision d = gcra_decide(limit, &bucket, now, cost);

	if (d.store)
	{
		slot->tat_us = d.new_tat_us;
		slot->interval_us = limit->interval_us;
	}
	return d;
}

/* ratelimit.store = memory needs the shared memory only preloading gives. */
bool
memory_store_in_use(void)
{
	if (ratelimit_store != STORE_MEMORY)
		return false;
	if (memory == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit.store is \"memory\", but ratelimit was not loaded by shared_preload_libraries"),
				 errdetail("The memory store lives in shared memory, which only a preloaded library can reserve."),
				 errhint("Add ratelimit to shared_preload_libraries and restart, or set ratelimit.store to \"table\".")));
	return true;
}

/*
 * Decide a request for a key that was not in memory: find where it lives or
 * give it a place, as the file header describes.  Called as the store owner.
 */
static GcraDecision
take_missing(const char *function, MemorySet *set, bytea *key,
			 const GcraLimit *limit, int64 now, int32 cost)
{
	const uint8 *digest = (const uint8 *) VARDATA(key);
	Oid			store_relid = bucket_store_relid();

	for (;;)
	{
		MemorySlot *slot;
		TransactionId inserting;
		GcraBucket	absent = {0};
		GcraDecision d;
		bool		inserted;

		CHECK_FOR_INTERRUPTS();
		/* the probe and the insert below must not wait under the set lock */
		bucket_store_lock_table();
		LWLockAcquire(&set->lock, LW_EXCLUSIVE);

		slot = find_slot(set, digest, store_relid);
		if (slot != NULL)
		{
			d = decide_in_slot(slot, limit, now, cost);
			LWLockRelease(&set->lock);
			return d;
		}

		if (bucket_store_probe(key, &inserting))
		{
			LWLockRelease(&set->lock);
			if (TransactionIdIsValid(inserting))
				XactLockTableWait(inserting, NULL, NULL, XLTW_None);
			if (cost > 0)
				PreventCommandIfReadOnly(function);
			if (bucket_store_take(key, limit, now, cost, false, &d))
				return d;
			continue;			/* the row went away: choose again */
		}

		d = gcra_decide(limit, &absent, now, cost);
		if (!d.store)
		{
			/* a denial or a peek of an absent key stores nothing */
			LWLockRelease(&set->lock);
			return d;
		}

		slot = reusable_slot(set, store_relid, now);
		if (slot != NULL)
		{
			slot->dboid = MyDatabaseId;
			slot->store_relid = store_relid;
			memcpy(slot->key, digest, BUCKET_KEY_LEN);
			slot->tat_us = d.new_tat_us;
			slot->interval_us = limit->interval_us;
			LWLockRelease(&set->lock);
			return d;
		}

		/*
		 * The set is full of live buckets: the key goes to rl_buckets,
		 * inserted under the set lock so that the next miss finds it.  An
		 * error here releases the lock with the (sub)transaction.
		 */
		PreventCommandIfReadOnly(function);
		inserted = bucket_store_insert(key, d.new_tat_us, limit->interval_us);
		LWLockRelease(&set->lock);
		if (inserted)
			return d;
	}
}

/* Decide a request of cost at now; called as the store owner. */
GcraDecision
memory_store_take(const char *function, bytea *key, const GcraLimit *limit,
				  int64 now, int32 cost)
{
	const uint8 *digest = (const uint8 *) VARDATA(key);
	MemorySet  *set = set_of(digest, MyDatabaseId);
	MemorySlot *slot;
	GcraDecision d;

	LWLockAcquire(&set->lock, LW_EXCLUSIVE);
	slot = find_slot(set, digest, bucket_store_relid());
	if (slot != NULL)
	{
		d = decide_in_slot(slot, limit, now, cost);
		LWLockRelease(&set->lock);
		return d;
	}
	LWLockRelease(&set->lock);
	return take_missing(function, set, key, limit, now, cost);
}

/*
 * rl_take_all in memory: every set of the request is locked, in the order of
 * the sets, so two calls over the same keys never deadlock and the decision
 * sees and stores all its buckets at one instant.  When a key lives in
 * rl_buckets, or a new key finds no slot, the whole request is decided in
 * the table instead: its keys in memory move there first (under their set
 * locks, so the next miss finds their rows), and its new keys get a passed
 * row there (the same as no bucket), as a spill does.
 */
void
memory_store_take_all(const char *function, const StoreRequest *requests,
					  int n, int64 now, GcraDecision *decisions)
{
	Oid			store_relid = bucket_store_relid();
	MemorySet  *sets[GCRA_MAX_REQUESTS];
	MemorySet  *locked[GCRA_MAX_REQUESTS];
	MemorySlot *slots[GCRA_MAX_REQUESTS];
	GcraRequest gcra[GCRA_MAX_REQUESTS] = {0};
	bool		in_table = false;
	int			nlocked = 0;
	int			i;
	int			j;

	Assert(n >= 1 && n <= GCRA_MAX_REQUESTS);
	bucket_store_lock_table();
	for (i = 0; i < n; i++)
	{
		sets[i] = set_of((const uint8 *) VARDATA(requests[i].key), MyDatabaseId);
		for (j = 0; j < nlocked && locked[j] != sets[i]; j++)
			;
		if (j == nlocked)
			locked[nlocked++] = sets[i];
	}
	/* the canonical order: by address of the set */
	for (i = 1; i < nlocked; i++)
		for (j = i; j > 0 && locked[j - 1] > locked[j]; j--)
		{
			MemorySet  *t = locked[j];

			locked[j] = locked[j - 1];
			locked[j - 1] = t;
		}
	for (i = 0; i < nlocked; i++)
		LWLockAcquire(&locked[i]->lock, LW_EXCLUSIVE);

	for (i = 0; i < n && !in_table; i++)
	{
		TransactionId inserting;

		gcra[i].limit = requests[i].limit;
		gcra[i].cost = requests[i].cost;
		gcra[i].shadow = requests[i].shadow;
		slots[i] = find_slot(sets[i], (const uint8 *) VARDATA(requests[i].key),
							 store_relid);
		if (slots[i] != NULL)
		{
			gcra[i].bucket.present = true;
			gcra[i].bucket.tat_us = slots[i]->tat_us;
			gcra[i].bucket.interval_us = slots[i]->interval_us;
		}
		else if (bucket_store_probe(requests[i].key, &inserting))
			in_table = true;
	}

	if (!in_table)
	{
		MemorySlot *claimed[GCRA_MAX_REQUESTS] = {0};

		gcra_decide_all(gcra, n, now, decisions);
		/* a new key that stores needs a slot: find them all before writing */
		for (i = 0; i < n && !in_table; i++)
		{
			if (slots[i] != NULL || !decisions[i].store)
				continue;
			for (j = 0; j < SET_SLOTS; j++)
			{
				MemorySlot *slot = &sets[i]->slots[j];
				int			k;

				if (!slot_reusable(slot, store_relid, passed_before(now)))
					continue;
				for (k = 0; k < i && claimed[k] != slot; k++)
					;
				if (k == i)
					break;
			}
			if (j == SET_SLOTS)
				in_table = true;
			else
				claimed[i] = &sets[i]->slots[j];
		}
		if (!in_table)
		{
			for (i = 0; i < n; i++)
			{
				MemorySlot *slot = slots[i] != NULL ? slots[i] : claimed[i];

				if (!decisions[i].store)
					continue;
				if (slot == claimed[i])
				{
					slot->dboid = MyDatabaseId;
					slot->store_relid = store_relid;
					memcpy(slot->key, VARDATA(requests[i].key), BUCKET_KEY_LEN);
				}
				slot->tat_us = decisions[i].new_tat_us;
				slot->interval_us = requests[i].limit.interval_us;
			}
			for (i = 0; i < nlocked; i++)
				LWLockRelease(&locked[i]->lock);
			return;
		}
	}

	/* decided in the table: move the request's keys there first */
	PreventCommandIfReadOnly(function);
	for (i = 0; i < n; i++)
	{
		const uint8 *digest = (const uint8 *) VARDATA(requests[i].key);
		MemorySlot *slot = find_slot(sets[i], digest, store_relid);
		TransactionId inserting;

		if (slot != NULL)
		{
			(void) bucket_store_insert(requests[i].key, slot->tat_us,
									   slot->interval_us);
			slot->dboid = InvalidOid;
		}
		else if (requests[i].cost > 0 &&
				 !bucket_store_probe(requests[i].key, &inserting))
			(void) bucket_store_insert(requests[i].key, now - 1,
									   requests[i].limit.interval_us);
	}
	for (i = 0; i < nlocked; i++)
		LWLockRelease(&locked[i]->lock);
	bucket_store_take_all(requests, n, now, decisions);
}

/*
 * rl_refund: give cost cells back to the live bucket of key, wherever it
 * lives; true when it changed one.
 */
bool
memory_store_refund(const char *function, bytea *key, int64 now, int32 cost)
{
	const uint8 *digest = (const uint8 *) VARDATA(key);
	MemorySet  *set = set_of(digest, MyDatabaseId);
	MemorySlot *slot;
	TransactionId inserting;
	bool		changed = false;
	bool		in_table;

	bucket_store_lock_table();
	LWLockAcquire(&set->lock, LW_EXCLUSIVE);
	slot = find_slot(set, digest, bucket_store_relid());
	if (slot != NULL)
	{
		if (slot->tat_us >= now)
		{
			__int128	back = (__int128) cost * slot->interval_us;
			int64		tat = slot->tat_us - back < now ? now :
				slot->tat_us - (int64) back;

			changed = tat != slot->tat_us;
			slot->tat_us = tat;
		}
		LWLockRelease(&set->lock);
		return changed;
	}
	in_table = bucket_store_probe(key, &inserting);
	LWLockRelease(&set->lock);
	if (!in_table)
		return false;
	if (TransactionIdIsValid(inserting))
		XactLockTableWait(inserting, NULL, NULL, XLTW_None);
	PreventCommandIfReadOnly(function);
	return bucket_store_refund(key, now, cost);
}

/* The bucket of key if it is in memory; false when it is not. */
bool
memory_store_read(bytea *key, GcraBucket *bucket)
{
	const uint8 *digest = (const uint8 *) VARDATA(key);
	MemorySet  *set = set_of(digest, MyDatabaseId);
	MemorySlot *slot;

	LWLockAcquire(&set->lock, LW_SHARED);
	slot = find_slot(set, digest, bucket_store_relid());
	if (slot != NULL)
	{
		bucket->present = true;
		bucket->tat_us = slot->tat_us;
		bucket->interval_us = slot->interval_us;
	}
	LWLockRelease(&set->lock);
	return slot != NULL;
}

/* Forget key if it is in memory; true when it was. */
bool
memory_store_delete(bytea *key)
{
	const uint8 *digest = (const uint8 *) VARDATA(key);
	MemorySet  *set = set_of(digest, MyDatabaseId);
	MemorySlot *slot;

	LWLockAcquire(&set->lock, LW_EXCLUSIVE);
	slot = find_slot(set, digest, bucket_store_relid());
	if (slot != NULL)
		slot->dboid = InvalidOid;
	LWLockRelease(&set->lock);
	return slot != NULL;
}

/*
 * Free the slots for which keep says no, one set lock at a time; answers how
 * many held a bucket of this database.
 */
typedef bool (*SlotKeep) (const MemorySlot *slot, const void *arg);

static int64
free_slots(SlotKeep keep, const void *arg)
{
	int64		freed = 0;
	int			s;
	int			i;

	for (s = 0; s < memory->nsets; s++)
	{
		MemorySet  *set = &memory->sets[s];

		LWLockAcquire(&set->lock, LW_EXCLUSIVE);
		for (i = 0; i < SET_SLOTS; i++)
		{
			MemorySlot *slot = &set->slots[i];

			if (slot->dboid != InvalidOid && !keep(slot, arg))
			{
				if (slot->dboid == MyDatabaseId)
					freed++;
				slot->dboid = InvalidOid;
			}
		}
		LWLockRelease(&set->lock);
	}
	return freed;
}

typedef struct CleanupScope
{
	Oid			store_relid;
	int64		now;
} CleanupScope;

static bool
keep_unless_passed_here(const MemorySlot *slot, const void *arg)
{
	const CleanupScope *scope = arg;

	return slot->dboid != MyDatabaseId ||
		(slot->store_relid == scope->store_relid && slot->tat_us >= scope->now);
}

/*
 * Free this database's slots whose bucket has passed, and those of dropped
 * installations of the extension here; answers how many it freed.
 */
int64
memory_store_cleanup(int64 now)
{
	CleanupScope scope = {bucket_store_relid(), now};

	return free_slots(keep_unless_passed_here, &scope);
}

static bool
keep_if_database_listed(const MemorySlot *slot, const void *arg)
{
	return list_member_oid((const List *) arg, slot->dboid);
}

/* Free the slots of databases that are not in databases (dropped ones). */
void
memory_store_forget_other_databases(List *databases)
{
	if (memory != NULL)
		(void) free_slots(keep_if_database_listed, databases);
}

/* Slots in all, and slots holding a live bucket of any database. */
void
memory_store_usage(int64 now, int64 *total, int64 *live)
{
	int			s;
	int			i;

	*total = (int64) memory->nsets * SET_SLOTS;
	*live = 0;
	for (s = 0; s < memory->nsets; s++)
	{
		MemorySet  *set = &memory->sets[s];

		LWLockAcquire(&set->lock, LW_SHARED);
		for (i = 0; i < SET_SLOTS; i++)
			if (set->slots[i].dboid != InvalidOid && set->slots[i].tat_us >= now)
				(*live)++;
		LWLockRelease(&set->lock);
	}
}

/*
 * Saving and loading, in the postmaster: at its exit every backend is gone,
 * and at its start none has begun.
 */

static pg_crc32c
save_crc(const SaveHeader *header, const MemorySlot *slots)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, header, sizeof(SaveHeader));
	COMP_CRC32C(crc, slots, header->count * sizeof(MemorySlot));
	FIN_CRC32C(crc);
	return crc;
}

static void
save_failed(const char *what)
{
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not %s \"%s\": %m", what, SAVE_FILE_TMP),
			 errdetail("The rate-limit buckets of the memory store are not saved; they start empty.")));
}

/*
 * on_shmem_exit of the postmaster: save the live buckets, but only after a
 * clean shutdown.  An immediate shutdown also exits normally, so the control
 * file tells them apart: only a completed shutdown checkpoint marks it shut
 * down.
 */
static void
save_buckets(int code, Datum arg)
{
	ControlFileData *control;
	bool		crc_ok;
	SaveHeader	header = {0};
	MemorySlot *slots;
	int64		now = GetCurrentTimestamp();
	int			fd;
	int			s;
	int			i;
	pg_crc32c	crc;
	size_t		bytes;

	if (code != 0 || memory == NULL)
		return;
	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok || control->state != DB_SHUTDOWNED)
		return;

	slots = palloc_extended(mul_size(mul_size(memory->nsets, SET_SLOTS),
									 sizeof(MemorySlot)),
							MCXT_ALLOC_NO_OOM);
	if (slots == NULL)
		return;
	for (s = 0; s < memory->nsets; s++)
		for (i = 0; i < SET_SLOTS; i++)
		{
			MemorySlot *slot = &memory->sets[s].slots[i];

			if (slot->dboid != InvalidOid && slot->tat_us >= now)
				slots[header.count++] = *slot;
		}
	header.magic = SAVE_MAGIC;
	header.version = SAVE_VERSION;
	header.system_identifier = control->system_identifier;
	header.slot_size = sizeof(MemorySlot);
	header.set_slots = SET_SLOTS;
	crc = save_crc(&header, slots);
	bytes = header.count * sizeof(MemorySlot);

	fd = OpenTransientFilePerm(SAVE_FILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY,
							   pg_file_create_mode);
	if (fd < 0)
	{
		save_failed("create");
		return;
	}
	if (write(fd, &header, sizeof(header)) != sizeof(header) ||
		(bytes > 0 && write(fd, slots, bytes) != bytes) ||
		write(fd, &crc, sizeof(crc)) != sizeof(crc) ||
		pg_fsync(fd) != 0)
	{
		save_failed("write");
		CloseTransientFile(fd);
		unlink(SAVE_FILE_TMP);
		return;
	}
	CloseTransientFile(fd);
	(void) durable_rename(SAVE_FILE_TMP, SAVE_FILE, LOG);
}

static void
ignore_save_file(const char *reason)
{
	ereport(LOG,
			(errmsg("ratelimit: ignoring the saved buckets in \"%s\": %s",
					SAVE_FILE, reason),
			 errdetail("The memory store starts empty.")));
}

/* Put a loaded bucket in its set; false when the set is full. */
static bool
place_loaded(const MemorySlot *loaded)
{
	MemorySet  *set = set_of(loaded->key, loaded->dboid);
	int			i;

	for (i = 0; i < SET_SLOTS; i++)
		if (set->slots[i].dboid == InvalidOid)
		{
			set->slots[i] = *loaded;
			return true;
		}
	return false;
}

/*
 * Load the buckets a clean shutdown saved, then remove the file, so that a
 * crash later starts empty.  Anything that is not exactly a save file of
 * this cluster is logged and ignored.
 */
static void
load_buckets(void)
{
	int			fd;
	struct stat st;
	char	   *contents;
	SaveHeader	header;
	MemorySlot *slots;
	pg_crc32c	crc;
	uint64		i;
	uint64		placed = 0;

	fd = OpenTransientFile(SAVE_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not open \"%s\": %m", SAVE_FILE)));
		return;
	}
	if (fstat(fd, &st) != 0 ||
		st.st_size < (off_t) (sizeof(SaveHeader) + sizeof(pg_crc32c)))
	{
		CloseTransientFile(fd);
		ignore_save_file("it is too short");
		unlink(SAVE_FILE);
		return;
	}
	contents = palloc_extended(st.st_size, MCXT_ALLOC_NO_OOM);
	if (contents == NULL || read(fd, contents, st.st_size) != st.st_size)
	{
		CloseTransientFile(fd);
		ignore_save_file("it could not be read");
		unlink(SAVE_FILE);
		return;
	}
	CloseTransientFile(fd);
	unlink(SAVE_FILE);

	memcpy(&header, contents, sizeof(header));
	slots = (MemorySlot *) (contents + sizeof(SaveHeader));
	if (header.magic != SAVE_MAGIC || header.version != SAVE_VERSION ||
		header.slot_size != sizeof(MemorySlot) || header.set_slots != SET_SLOTS)
	{
		ignore_save_file("it is not a save file of this version of ratelimit");
		return;
	}
	if (header.system_identifier != GetSystemIdentifier())
	{
		ignore_save_file("it was saved by another cluster");
		return;
	}
	if (header.count > (st.st_size - sizeof(SaveHeader) - sizeof(pg_crc32c)) / sizeof(MemorySlot) ||
		sizeof(SaveHeader) + header.count * sizeof(MemorySlot) + sizeof(pg_crc32c) != st.st_size)
	{
		ignore_save_file("its length does not match its header");
		return;
	}
	memcpy(&crc, contents + st.st_size - sizeof(pg_crc32c), sizeof(crc));
	if (!EQ_CRC32C(crc, save_crc(&header, slots)))
	{
		ignore_save_file("its checksum does not match");
		return;
	}

	for (i = 0; i < header.count; i++)
		if (slots[i].dboid != InvalidOid && slots[i].interval_us > 0 &&
			place_loaded(&slots[i]))
			placed++;
	ereport(LOG,
			(errmsg("ratelimit: loaded %llu of %llu buckets saved at shutdown",
					(unsigned long long) placed,
					(unsigned long long) header.count)));
	pfree(contents);
}

static void
memory_store_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	if (ratelimit_store == STORE_MEMORY)
		RequestAddinShmemSpace(memory_size());
}

static void
memory_store_shmem_startup(void)
{
	bool		found;
	int			s;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	if (ratelimit_store != STORE_MEMORY)
		return;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	memory = ShmemInitStruct("ratelimit memory store", memory_size(), &found);
	if (!found)
	{
		memory->tranche_id = LWLockNewTrancheId();
		memory->nsets = set_count();
		for (s = 0; s < memory->nsets; s++)
		{
			LWLockInitialize(&memory->sets[s].lock, memory->tranche_id);
			memset(memory->sets[s].slots, 0, sizeof(memory->sets[s].slots));
		}
	}
	LWLockRelease(AddinShmemInitLock);
	LWLockRegisterTranche(memory->tranche_id, "ratelimit");

	/* the postmaster, at start and after a crash (then the file is gone) */
	if (!IsUnderPostmaster)
	{
		load_buckets();
		on_shmem_exit(save_buckets, (Datum) 0);
	}
}

/*
 * Called from _PG_init.  Both settings take effect at server start, but
 * PostgreSQL accepts PGC_POSTMASTER settings only from a preloaded library;
 * loaded later, they are defined as reloadable so that a server configured
 * with store = memory but without preloading is told so at the first call
 * instead of deciding in the table.
 */
void
memory_store_define_settings(void)
{
	GucContext	context = process_shared_preload_libraries_in_progress ?
		PGC_POSTMASTER : PGC_SIGHUP;

	DefineCustomEnumVariable("ratelimit.store",
							 "Where rate-limit buckets live: \"table\" (rl_buckets) or \"memory\" (shared memory).",
							 "\"memory\" needs ratelimit in shared_preload_libraries.",
							 &ratelimit_store,
							 STORE_TABLE,
							 store_options,
							 context,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("ratelimit.memory_buckets",
							"Slots of the memory store: buckets it holds before new keys go to rl_buckets.",
							NULL,
							&ratelimit_memory_buckets,
							100000,
							SET_SLOTS, INT_MAX / 2,
							context,
							0,
							NULL, NULL, NULL);
}

/* Called from _PG_init while preloading. */
void
memory_store_register(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = memory_store_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = memory_store_shmem_startup;
}
