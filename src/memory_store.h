/*
 * memory_store.h
 *		The memory store's shared-memory layout, shared by memory_store.c
 *		(decisions) and memory_save.c (the save file).
 */
#ifndef MEMORY_STORE_H
#define MEMORY_STORE_H

#include <limits.h>

#include "storage/lwlock.h"

#include "ratelimit.h"

/* slots per set: one lock, and the slots a key can use */
#define SET_SLOTS 16

/* the largest ratelimit.memory_buckets */
#define MEMORY_BUCKETS_MAX (INT_MAX / 2)

typedef struct MemorySlot
{
	Oid			dboid;			/* InvalidOid: free */
	Oid			store_relid;	/* that database's rl_buckets */
	int64		tat_us;
	int64		interval_us;	/* the T it was last written with */
	int64		lock_until_us;	/* 1.3's lock: locked while now < it; 0: none */
	int64		lock_us;		/* the last lockout's length; 0: none */
	uint8		key[BUCKET_KEY_LEN];
} MemorySlot;

/*
 * Whether a slot's bucket is the same as an absent one by passed, as the
 * table store's cleanup deletes a row (gcra_bucket_forgotten): its tat is
 * at or before passed, and it was never locked or its last lockout and the
 * time that lengthens the next one have passed.
 */
static inline bool
memory_slot_passed(const MemorySlot *slot, int64 passed)
{
	return slot->tat_us <= passed &&
		(slot->lock_us == 0 || slot->lock_until_us + slot->lock_us <= passed);
}

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

/* The set a key of database dboid lives in: the digest is uniform already. */
static inline MemorySet *
memory_set_of(MemoryStore *memory, const uint8 *key, Oid dboid)
{
	uint64		hash;

	memcpy(&hash, key, sizeof(hash));
	hash ^= (uint64) dboid * UINT64CONST(0x9e3779b97f4a7c15);
	return &memory->sets[hash % memory->nsets];
}

/* memory_save.c, in the postmaster */
extern void memory_save_load(MemoryStore *memory);
extern void memory_save_at_exit(int code, Datum arg);
extern void memory_save_remove(void);

#endif							/* MEMORY_STORE_H */
