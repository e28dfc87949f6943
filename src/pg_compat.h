/*
 * pg_compat.h
 *		Every difference of the server API between the PostgreSQL majors
 *		ratelimit supports (15, 17 and 18), in one place.
 *
 * One block per change, named after the major that made it; the call sites
 * use the names defined here and read the same on every major.
 */
#ifndef RATELIMIT_PG_COMPAT_H
#define RATELIMIT_PG_COMPAT_H

#include "postgres.h"

#include "access/tableam.h"
#include "executor/executor.h"
#include "lib/ilist.h"

/*
 * 16: table_tuple_update reports which indexes need entries for the new row
 * version as a TU_UpdateIndexes (none: a HOT update; all; or only the
 * summarizing ones) instead of a bool, and ExecInsertIndexTuples takes
 * onlySummarizing to match (false for a new row: every index).  The value is
 * passed through: read as a bool, TU_Summarizing would add entries to every
 * index for a HOT-updated row.
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes RlUpdateIndexes;
#define RL_UPDATE_NEEDS_INDEX_ENTRIES(u) ((u) != TU_None)
#define rl_insert_update_index_tuples(rri, slot, estate, u) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL, \
						  (u) == TU_Summarizing)
#define rl_insert_speculative_index_tuples(rri, slot, estate, conflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, true, (conflict), \
						  (arbiters), false)
#else
typedef bool RlUpdateIndexes;
#define RL_UPDATE_NEEDS_INDEX_ENTRIES(u) (u)
#define rl_insert_update_index_tuples(rri, slot, estate, u) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL)
#define rl_insert_speculative_index_tuples(rri, slot, estate, conflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, true, (conflict), \
						  (arbiters))
#endif

/*
 * 18: ExecCheckIndexConstraints takes the TID of a row the check skips;
 * before an insertion there is none (an invalid one, as ExecInsert passes).
 */
#if PG_VERSION_NUM >= 180000
static inline bool
rl_check_index_constraints(ResultRelInfo *rri, TupleTableSlot *slot,
						   EState *estate, ItemPointer conflict_tid,
						   List *arbiters)
{
	ItemPointerData none;

	ItemPointerSetInvalid(&none);
	return ExecCheckIndexConstraints(rri, slot, estate, conflict_tid, &none,
									 arbiters);
}
#else
#define rl_check_index_constraints(rri, slot, estate, conflict_tid, arbiters) \
	ExecCheckIndexConstraints((rri), (slot), (estate), (conflict_tid), (arbiters))
#endif

/*
 * 16: the server frees a GUC check hook's extra with guc_free() (a pfree in
 * its own memory context), so it must come from guc_malloc(); before 16 it
 * was free(), and guc_malloc() was private to guc.c.  Both return NULL when
 * out of memory.
 */
#if PG_VERSION_NUM >= 160000
#define rl_guc_extra_malloc(size) guc_malloc(LOG, (size))
#else
#define rl_guc_extra_malloc(size) malloc(size)
#endif

/*
 * 18: index_beginscan takes an IndexScanInstrumentation (NULL: none, as for
 * any scan outside EXPLAIN ANALYZE).
 */
#if PG_VERSION_NUM >= 180000
#define rl_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define rl_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * 18: RelationGetPrimaryKeyIndex takes deferrable_ok.  false keeps the
 * earlier answer: a deferrable primary key is no primary key here.
 */
#if PG_VERSION_NUM >= 180000
#define rl_primary_key_index(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define rl_primary_key_index(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/* 18: BackgroundWorkerList is a dlist (it was an slist). */
#if PG_VERSION_NUM >= 180000
typedef dlist_iter RlWorkerListIter;
#define rl_foreach_registered_worker(iter) \
	dlist_foreach((iter), &BackgroundWorkerList)
#else
typedef slist_iter RlWorkerListIter;
#define rl_foreach_registered_worker(iter) \
	slist_foreach((iter), &BackgroundWorkerList)
#endif

#endif							/* RATELIMIT_PG_COMPAT_H */
