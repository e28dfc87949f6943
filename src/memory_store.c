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
 * stored before the server switched stores.  So a miss probes the table with
 * a dirty snapshot, which also sees rows that other transactions are still
 * inserting; a row found there is where the key is decided, by the table
 * store's rules.  Otherwise the key is given a place under a heavyweight
 * lock on the key: a slot of its set that is free, holds a bucket that has
 * passed (the same as an absent one) or belongs to a dropped installation of
 * the extension; when there is none, a row of rl_buckets.  No LWLock is held
 * while the table is read or written or while anything is waited for: such a
 * wait could not be cancelled, and the deadlock detector could not see it.
 * A call waits for a row's inserter or lock without that key's lock (the
 * transaction waited for may decide the key next); an rl_take_all holds then
 * only the places of its keys before that one in key order, as the table
 * store holds their rows, so it deadlocks no more than the table store.
 * Table decisions made for this store never insert without the key lock:
 * when the row is gone (cleanup deletes passed ones), the key comes back here.
 *
 * Slots carry the database and the OID of that database's rl_buckets, so one
 * database never answers another's keys and a dropped extension's buckets
 * are never found again; cleanup frees them.
 *
 * A clean shutdown saves the live buckets and the next start loads them
 * (memory_save.c).
 */
#include "postgres.h"

#include <limits.h>

#include "access/transam.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "memory_store.h"

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

/* The set a key lives in. */
static MemorySet *
set_of(const uint8 *key, Oid dboid)
{
	return memory_set_of(memory, key, dboid);
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
 * Whether a new key may take slot: free, holding a bucket that has passed
 * (memory_slot_passed: a key keeps its slot while its lockout can still
 * lengthen), or left by a dropped installation of the extension in this
 * database.  Passed (passed_before) by the server clock too: a call of
 * rl_take_at in the future must not take the slot of a bucket that is live
 * for everybody else (the table store keeps such a row until cleanup, which
 * goes by the server clock).
 */
static inline int64
passed_before(int64 now)
{
	return Min(now, GetCurrentTimestamp());
}

static inline bool
slot_reusable(const MemorySlot *slot, Oid store_relid, int64 passed)
{
	return slot->dboid == InvalidOid || memory_slot_passed(slot, passed) ||
		(slot->dboid == MyDatabaseId && slot->store_relid != store_relid);
}

/*
 * A slot of set that a new key may take (slot_reusable), other than the
 * taken ones: those of the other keys of the same call, whose buckets may
 * have passed.  A free slot first: a passed bucket is the same as an absent
 * one, but it is found again without a miss (and its probe of rl_buckets)
 * while it stays.
 */
static MemorySlot *
reusable_slot(MemorySet *set, Oid store_relid, int64 now,
			  MemorySlot *const *taken, int ntaken)
{
	int64		passed = passed_before(now);
	MemorySlot *reusable = NULL;
	int			i;
	int			j;

	for (i = 0; i < SET_SLOTS; i++)
	{
		MemorySlot *slot = &set->slots[i];

		for (j = 0; j < ntaken && taken[j] != slot; j++)
			;
		if (j < ntaken)
			continue;
		if (slot->dboid == InvalidOid)
			return slot;
		if (reusable == NULL && slot_reusable(slot, store_relid, passed))
			reusable = slot;
	}
	return reusable;
}

/* Give slot to key, holding a passed bucket: the same as none. */
static void
take_slot(MemorySlot *slot, const uint8 *key, Oid store_relid)
{
	slot->dboid = MyDatabaseId;
	slot->store_relid = store_relid;
	memcpy(slot->key, key, BUCKET_KEY_LEN);
	slot->tat_us = PG_INT64_MIN;
	slot->interval_us = 1;
	slot->lock_until_us = 0;
	slot->lock_us = 0;
}

static void
bucket_of_slot(const MemorySlot *slot, GcraBucket *bucket)
{
	bucket->present = true;
	bucket->tat_us = slot->tat_us;
	bucket->interval_us = slot->interval_us;
	bucket->lock_until_us = slot->lock_until_us;
	bucket->lock_us = slot->lock_us;
}

/* Store a decision in slot when it says so: a locked denial stores nothing. */
static void
store_in_slot(MemorySlot *slot, const GcraDecision *d, const GcraLimit *limit)
{
	if (!d->store)
		return;
	slot->tat_us = d->new_tat_us;
	slot->interval_us = limit->interval_us;
	slot->lock_until_us = d->new_lock_until_us;
	slot->lock_us = d->new_lock_us;
}

static GcraDecision
decide_in_slot(MemorySlot *slot, const GcraLimit *limit, int64 now, int32 cost)
{
	GcraBucket	bucket;
	GcraDecision d;

	bucket_of_slot(slot, &bucket);
	d = gcra_decide(limit, &bucket, now, cost);
	store_in_slot(slot, &d, limit);
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
 * The heavyweight lock that serialises giving key a place (a miss, a spill):
 * an advisory lock of this database, tagged apart from pg_advisory_lock's.
 * Waiting for it can be cancelled, and the deadlock detector sees it.
 */
#define KEY_LOCK_TAG 0x524c		/* "RL" */

static void
key_lock_tag(LOCKTAG *tag, const bytea *key)
{
	uint32		words[2];

	memcpy(words, VARDATA_ANY(key), sizeof(words));
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, words[0], words[1], KEY_LOCK_TAG);
}

static void
lock_key(const bytea *key)
{
	LOCKTAG		tag;

	key_lock_tag(&tag, key);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

static void
unlock_key(const bytea *key)
{
	LOCKTAG		tag;

	key_lock_tag(&tag, key);
	LockRelease(&tag, ExclusiveLock, false);
}

/*
 * Whether key lives in rl_buckets, once a transaction still inserting its
 * row has ended.  Index and heap access, and a wait: never under an LWLock,
 * nor under the key's lock.
 */
static bool
in_table(bytea *key)
{
	TransactionId inserting;

	while (bucket_store_probe(key, &inserting))
	{
		if (!TransactionIdIsValid(inserting))
			return true;
		XactLockTableWait(inserting, NULL, NULL, XLTW_None);
	}
	return false;
}

/*
 * Decide a request in the slot of key, under its set's lock, at the clock
 * read once the lock is held; with claim, a key without a slot takes a
 * reusable one.  False when the key has no slot: nothing was decided.
 */
static bool
decide_in_memory(MemorySet *set, const uint8 *key, const GcraLimit *limit,
				 int64 at, int32 cost, bool claim, GcraDecision *d)
{
	Oid			store_relid = bucket_store_relid();
	MemorySlot *slot;
	int64		now;

	LWLockAcquire(&set->lock, LW_EXCLUSIVE);
	now = decision_time(at);
	slot = find_slot(set, key, store_relid);
	if (slot == NULL && claim &&
		(slot = reusable_slot(set, store_relid, now, NULL, 0)) != NULL)
		take_slot(slot, key, store_relid);
	if (slot != NULL)
		*d = decide_in_slot(slot, limit, now, cost);
	LWLockRelease(&set->lock);
	return slot != NULL;
}

/*
 * Decide a request of cost at time at; called as the store owner.
 *
 * A key in memory is decided under its set's lock alone.  Otherwise a key
 * with a row is decided in rl_buckets, by the table store's rules.  An
 * absent key that must store is given a place under its key lock, after the
 * probe has found no row there (nobody inserts one without that lock): a
 * reusable slot of its set, or, when the set is full of live buckets, a row
 * of rl_buckets.  The lock is released once the row is inserted: the next
 * miss for the key finds the row, committed or still being inserted (then it
 * waits for that transaction, holding no key lock), so a transaction that
 * spills many keys holds one key lock at a time, never a lock per key until
 * it commits.
 */
GcraDecision
memory_store_take(const char *function, bytea *key, const GcraLimit *limit,
				  int64 at, int32 cost)
{
	const uint8 *digest = (const uint8 *) VARDATA(key);
	MemorySet  *set = set_of(digest, MyDatabaseId);
	GcraBucket	absent = {0};
	GcraDecision d;
	TransactionId inserting;

	if (decide_in_memory(set, digest, limit, at, cost, false, &d))
		return d;
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (in_table(key))
		{
			store_check_writable(function, cost);
			if (bucket_store_take(BUCKETS_UNLOGGED, key, limit, at, cost, false, &d))
				return d;
			continue;			/* the row went away: choose again */
		}

		/* a denial or a peek of an absent key stores nothing */
		d = gcra_decide(limit, &absent, decision_time(at), cost);
		if (!d.store)
			return d;

		lock_key(key);
		/* a row inserted meanwhile: start again, to wait without the lock */
		if (!bucket_store_probe(key, &inserting))
		{
			if (decide_in_memory(set, digest, limit, at, cost, true, &d))
			{
				unlock_key(key);
				return d;
			}
			store_check_writable(function, cost);
			d = gcra_decide(limit, &absent, decision_time(at), cost);
			if (bucket_store_insert(key, &(GcraBucket) {
						.present = true, .tat_us = d.new_tat_us,
						.interval_us = limit->interval_us,
						.lock_until_us = d.new_lock_until_us,
					.lock_us = d.new_lock_us}))
			{
				unlock_key(key);
				return d;
			}
		}
		unlock_key(key);
	}
}

/* The sets of a call's keys, each once, in the one order they are locked. */
typedef struct CallSets
{
	MemorySet  *of[GCRA_MAX_REQUESTS];	/* the set of each request */
	MemorySet  *locked[GCRA_MAX_REQUESTS];
	int			nlocked;
} CallSets;

static void
call_sets(const StoreRequest *requests, int n, CallSets *sets)
{
	int			i;
	int			j;

	sets->nlocked = 0;
	for (i = 0; i < n; i++)
	{
		sets->of[i] = set_of((const uint8 *) VARDATA(requests[i].key), MyDatabaseId);
		for (j = 0; j < sets->nlocked && sets->locked[j] != sets->of[i]; j++)
			;
		if (j == sets->nlocked)
			sets->locked[sets->nlocked++] = sets->of[i];
	}
	/* by address, so two calls over the same keys never deadlock */
	for (i = 1; i < sets->nlocked; i++)
		for (j = i; j > 0 && sets->locked[j - 1] > sets->locked[j]; j--)
		{
			MemorySet  *t = sets->locked[j];

			sets->locked[j] = sets->locked[j - 1];
			sets->locked[j - 1] = t;
		}
}

static void
lock_call_sets(const CallSets *sets)
{
	int			i;

	for (i = 0; i < sets->nlocked; i++)
		LWLockAcquire(&sets->locked[i]->lock, LW_EXCLUSIVE);
}

static void
unlock_call_sets(const CallSets *sets)
{
	int			i;

	for (i = 0; i < sets->nlocked; i++)
		LWLockRelease(&sets->locked[i]->lock);
}

/* Store the decisions of requests that live in slots (NULL: elsewhere). */
static void
store_in_slots(const StoreRequest *requests, int n, MemorySlot *const *slots,
			   const GcraDecision *decisions)
{
	int			i;

	for (i = 0; i < n; i++)
		if (slots[i] != NULL)
			store_in_slot(slots[i], &decisions[i], &requests[i].limit);
}

/*
 * Keep key in its place until the call ends, for a call that stores: the row
 * of a key that lives in rl_buckets is locked and returned, *bucket its
 * newest version; otherwise the key lock is taken (no row can appear while
 * it is held) and the answer is NULL.  With row_seen, the key was read in
 * rl_buckets.  A row inserted meanwhile is waited for, like its lock,
 * without the key lock.
 */
static BucketAccess *
hold_place(const char *function, bytea *key, int32 cost, bool row_seen,
		   GcraBucket *bucket)
{
	BucketAccess *row;
	TransactionId inserting;

	for (;;)
	{
		if (row_seen && in_table(key))
		{
			store_check_writable(function, cost);
			/* NULL: cleanup deleted the passed row meanwhile */
			if ((row = bucket_store_lock_row(key, bucket)) != NULL)
				return row;
		}
		lock_key(key);
		if (!bucket_store_probe(key, &inserting))
			return NULL;
		unlock_key(key);
		row_seen = true;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * rl_take_all in memory; called as the store owner.
 *
 * The sets of the call's keys are locked in one order, so that the call sees
 * and stores its memory buckets at one instant.  When every key is in
 * memory, that is the whole decision.  Otherwise the keys elsewhere are read
 * in their tables without a lock, and a call that has nothing to store (a
 * denial or peeks) ends there, having written and locked nothing.
 *
 * A call that stores never moves a bucket: each key is decided where it
 * lives.  It holds each key it stores in its place (hold_place), in key
 * order, the order in which the table store locks rows: the row of a key in
 * rl_buckets, or else the key lock, so that no key changes place meanwhile.
 * A durable limiter's key never lives in memory: its row of
 * rl_buckets_durable is locked, inserted first if absent, as the table store
 * does.
 * It waits for a row holding only the places of the keys before it, as the
 * table store's calls do: with the lock of a key after it, the call would
 * deadlock with a transaction inserting the row and deciding that key next.
 * Then, under the set locks, it decides every request at one clock, on the
 * locked rows and the memory buckets, and stores in memory; a new key that
 * finds no reusable slot gets a passed row (the same as no bucket), and the
 * step is made again.  The locked rows are written last: nobody else can
 * change them before this transaction ends, and they follow the table
 * store's rules.
 */
void
memory_store_take_all(const char *function, const StoreRequest *requests,
					  int n, int64 at, GcraDecision *decisions)
{
	Oid			store_relid = bucket_store_relid();
	CallSets	sets;
	MemorySlot *slots[GCRA_MAX_REQUESTS] = {0};
	BucketAccess *rows[GCRA_MAX_REQUESTS] = {0};
	bool		spilled[GCRA_MAX_REQUESTS] = {0};
	GcraRequest gcra[GCRA_MAX_REQUESTS] = {0};
	int			order[GCRA_MAX_REQUESTS];
	bool		row_seen[GCRA_MAX_REQUESTS] = {0};
	bool		key_locked[GCRA_MAX_REQUESTS] = {0};
	int32		table_cost = 0;
	bool		all_in_memory = true;
	bool		must_store = false;
	int			i;

	Assert(n >= 1 && n <= GCRA_MAX_REQUESTS);
	call_sets(requests, n, &sets);

	lock_call_sets(&sets);
	for (i = 0; i < n; i++)
	{
		gcra[i].limit = requests[i].limit;
		gcra[i].cost = requests[i].cost;
		gcra[i].shadow = requests[i].shadow;
		if (requests[i].table == BUCKETS_UNLOGGED)
			slots[i] = find_slot(sets.of[i], (const uint8 *) VARDATA(requests[i].key),
								 store_relid);
		if (slots[i] != NULL)
			bucket_of_slot(slots[i], &gcra[i].bucket);
		else
			all_in_memory = false;
	}
	if (all_in_memory)
	{
		gcra_decide_all(gcra, n, decision_time(at), decisions);
		store_in_slots(requests, n, slots, decisions);
		unlock_call_sets(&sets);
		return;
	}
	unlock_call_sets(&sets);

	for (i = 0; i < n; i++)
		if (slots[i] == NULL)
		{
			bucket_store_read(requests[i].table, requests[i].key, &gcra[i].bucket);
			row_seen[i] = gcra[i].bucket.present;
			if (gcra[i].bucket.present || requests[i].table == BUCKETS_DURABLE)
				table_cost = Max(table_cost, gcra[i].cost);
		}
	/* keys that live in a table follow the table store's rules */
	store_check_writable(function, table_cost);
	gcra_decide_all(gcra, n, decision_time(at), decisions);
	for (i = 0; i < n; i++)
		must_store |= decisions[i].store;
	if (!must_store)
		return;

	bucket_store_key_order(requests, n, order);
	for (i = 0; i < n; i++)
	{
		int			r = order[i];

		if (requests[r].cost > 0 && requests[r].table == BUCKETS_DURABLE)
			rows[r] = bucket_store_hold_row(BUCKETS_DURABLE, requests[r].key,
											&requests[r].limit,
											decision_time(at), &gcra[r].bucket);
		else if (requests[r].cost > 0)
		{
			rows[r] = hold_place(function, requests[r].key, requests[r].cost,
								 row_seen[r], &gcra[r].bucket);
			key_locked[r] = rows[r] == NULL;
		}
	}

	for (;;)
	{
		MemorySlot *taken[GCRA_MAX_REQUESTS];
		bool		claimed[GCRA_MAX_REQUESTS] = {0};
		int			ntaken = 0;
		bool		spill = false;
		int64		now;

		lock_call_sets(&sets);
		for (i = 0; i < n; i++)
		{
			slots[i] = NULL;
			/* a durable peek keeps its first read too */
			if (rows[i] != NULL || requests[i].table == BUCKETS_DURABLE)
				continue;
			slots[i] = find_slot(sets.of[i], (const uint8 *) VARDATA(requests[i].key),
								 store_relid);
			if (slots[i] != NULL)
			{
				bucket_of_slot(slots[i], &gcra[i].bucket);
				taken[ntaken++] = slots[i];
			}
			else if (requests[i].cost > 0)
				gcra[i].bucket.present = false;
			/* a peek not in memory now keeps its first read */
		}
		now = decision_time(at);
		gcra_decide_all(gcra, n, now, decisions);

		/* a new key that stores needs a slot: find them all before writing */
		for (i = 0; i < n; i++)
		{
			if (rows[i] != NULL || slots[i] != NULL || !decisions[i].store)
				continue;
			slots[i] = reusable_slot(sets.of[i], store_relid, now, taken, ntaken);
			if (slots[i] == NULL)
				spilled[i] = spill = true;
			else
				taken[ntaken++] = slots[i];
			claimed[i] = slots[i] != NULL;
		}
		if (!spill)
		{
			for (i = 0; i < n; i++)
				if (claimed[i])
					take_slot(slots[i], (const uint8 *) VARDATA(requests[i].key),
							  store_relid);
			store_in_slots(requests, n, slots, decisions);
			unlock_call_sets(&sets);
			break;
		}
		unlock_call_sets(&sets);

		/* its set is full of live buckets: the key goes to rl_buckets */
		for (i = 0; i < n; i++)
			if (spilled[i] && rows[i] == NULL)
			{
				store_check_writable(function, requests[i].cost);
				(void) bucket_store_insert(requests[i].key, &(GcraBucket) {
						.present = true, .tat_us = now - 1,
					.interval_us = requests[i].limit.interval_us});
				rows[i] = bucket_store_lock_row(requests[i].key, &gcra[i].bucket);
				if (rows[i] == NULL)
					elog(ERROR, "a rate-limit bucket inserted under its key lock is gone");
			}
	}

	for (i = 0; i < n; i++)
	{
		if (rows[i] != NULL)
		{
			if (decisions[i].store)
				bucket_store_write_row(rows[i], &decisions[i], &requests[i].limit);
			bucket_store_close_row(rows[i]);
		}
		if (key_locked[i])
			unlock_key(requests[i].key);
	}
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
	bool		changed = false;

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
	LWLockRelease(&set->lock);
	if (!in_table(key))
		return false;
	store_check_writable(function, cost);
	return bucket_store_refund(BUCKETS_UNLOGGED, key, now, cost);
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
		bucket_of_slot(slot, bucket);
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
typedef bool (*SlotKeep) (const MemorySlot *slot, void *arg);

static int64
free_slots(SlotKeep keep, void *arg)
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
keep_unless_passed_here(const MemorySlot *slot, void *arg)
{
	const CleanupScope *scope = arg;

	return slot->dboid != MyDatabaseId ||
		(slot->store_relid == scope->store_relid &&
		 !memory_slot_passed(slot, scope->now));
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

typedef struct RoundScope
{
	int64		now;
	const Oid  *databases;		/* sorted */
	int			ndatabases;
	int64	   *freed;			/* per database */
	Oid		   *unknown;
	int			nunknown;
	int			max_unknown;
} RoundScope;

static bool
keep_in_round(const MemorySlot *slot, void *arg)
{
	RoundScope *round = arg;
	const Oid  *listed = bsearch(&slot->dboid, round->databases,
								 round->ndatabases, sizeof(Oid), oid_cmp);
	int			i;

	if (listed != NULL)
	{
		if (!memory_slot_passed(slot, round->now))
			return true;
		round->freed[listed - round->databases]++;
		return false;
	}
	/* passed: the same as absent, whatever its database */
	if (memory_slot_passed(slot, round->now))
		return false;
	for (i = 0; i < round->nunknown && round->unknown[i] != slot->dboid; i++)
		;
	if (i == round->nunknown && i < round->max_unknown)
		round->unknown[round->nunknown++] = slot->dboid;
	return true;
}

/*
 * The cleanup worker's round, in one walk over the store for every
 * database: free every slot whose bucket passed before now, counting in
 * freed[i] those of databases[i] (sorted, the databases that existed when
 * the round began).  A live bucket of a database not listed stays: the
 * database may have been created since.  Up to max_unknown such databases
 * are put in unknown; answers how many, for the caller to check and pass to
 * memory_store_forget_databases when they are gone.
 */
int
memory_store_cleanup_round(int64 now, const Oid *databases, int ndatabases,
						   int64 *freed, Oid *unknown, int max_unknown)
{
	RoundScope	round = {now, databases, ndatabases, freed, unknown, 0,
	max_unknown};

	if (memory != NULL)
		(void) free_slots(keep_in_round, &round);
	return round.nunknown;
}

typedef struct DatabaseArray
{
	const Oid  *oids;
	int			n;
} DatabaseArray;

static bool
keep_unless_database_listed(const MemorySlot *slot, void *arg)
{
	const DatabaseArray *dropped = arg;
	int			i;

	for (i = 0; i < dropped->n; i++)
		if (dropped->oids[i] == slot->dboid)
			return false;
	return true;
}

/* Free the slots of the ndatabases databases, dropped ones. */
void
memory_store_forget_databases(const Oid *databases, int ndatabases)
{
	DatabaseArray dropped = {databases, ndatabases};

	if (memory != NULL && ndatabases > 0)
		(void) free_slots(keep_unless_database_listed, &dropped);
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
			if (set->slots[i].dboid != InvalidOid &&
				!memory_slot_passed(&set->slots[i], now))
				(*live)++;
		LWLockRelease(&set->lock);
	}
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
	{
		/* the buckets of an earlier memory-store period are out of date */
		if (!IsUnderPostmaster)
			memory_save_remove();
		return;
	}

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
		memory_save_load(memory);
		on_shmem_exit(memory_save_at_exit, PointerGetDatum(memory));
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
							SET_SLOTS, MEMORY_BUCKETS_MAX,
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
