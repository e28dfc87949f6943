/*
 * policy.c
 *		Named limits: the rl_policies table, cached in every backend, and
 *		rl_take(limiter, key, cost) by the limiter's policy.
 *
 * A policy call must cost no more than the explicit one, so policies are not
 * read from the table on every call: each backend keeps the ones it used,
 * and the names it found without a policy, which the explicit forms ask
 * about on every call (a limiter with a policy is decided by it only).  A
 * trigger on rl_policies queues a relcache invalidation of the table, which
 * PostgreSQL delivers to every backend when the change commits (and to
 * nobody when it rolls back); the relcache callback here then empties the
 * cache, and the next call reads the table again.  Every call accepts the
 * invalidations queued for it first, so that a change committed since the
 * last call applies inside an open transaction too.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_proc.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "pg_compat.h"
#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_take_policy);
PG_FUNCTION_INFO_V1(rl_take_at_policy);
PG_FUNCTION_INFO_V1(rl_policies_changed);

/* rl_policies columns: 1.1's four, and 1.3's lockout and durable */
#define ATT_LIMITER 1
#define ATT_RATE 2
#define ATT_BURST 3
#define ATT_SHADOW 4
#define ATT_LOCKOUT 5
#define ATT_LOCKOUT_GROWTH 6
#define ATT_LOCKOUT_MAX 7
#define ATT_DURABLE 8
#define POLICY_NATTS_1_1 4
#define POLICY_NATTS 8

typedef struct PolicyEntry
{
	char	   *limiter;		/* hash key: a NUL-terminated copy */
	int			length;			/* strlen(limiter) */
	bool		exists;			/* false: the limiter has no policy */
	Policy		policy;
} PolicyEntry;

/*
 * Limiter names a backend keeps at most: one that makes up names for the
 * explicit form (a limiter per tenant) empties the cache now and then rather
 * than grow it without end.
 */
#define MAX_CACHED_LIMITERS 4096

/*
 * rl_policies' OID once policies_found, InvalidOid when the extension has no
 * such table (its 1.0 objects: no limiter has a policy).  Found again after
 * it or any function changed.
 */
static Oid	policies_relid = InvalidOid;
static bool policies_found = false;

/* the cache, in its own context; reset when cache_valid is false */
static MemoryContext policy_context = NULL;
static HTAB *policies = NULL;
static bool cache_valid = false;

/* invalidations that emptied the cache: a read they overtook is read again */
static uint64 policy_invalidations = 0;

/*
 * The entry found last: a backend usually asks for one limiter over and
 * over, which then costs a length and a memcmp, not a copy of the name and
 * a hash lookup.  NULL whenever the cache is emptied.
 */
static PolicyEntry *last_entry = NULL;

/* An invalidation may arrive at any time: only mark, empty on next use. */
static void
forget_policies(Datum arg, Oid relid)
{
	if (relid == InvalidOid || (policies_found && relid == policies_relid))
	{
		cache_valid = false;
		policies_found = false;
		policy_invalidations++;
	}
}

static void
forget_policies_on_proc_change(Datum arg, int cacheid, uint32 hashvalue)
{
	/* DROP, CREATE and ALTER EXTENSION make another table */
	cache_valid = false;
	policies_found = false;
	policy_invalidations++;
}

static uint32
limiter_hash(const void *key, Size keysize)
{
	const char *name = *(char *const *) key;

	return hash_bytes((const unsigned char *) name, strlen(name));
}

static int
limiter_match(const void *a, const void *b, Size keysize)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

static void *
limiter_copy(void *dest, const void *src, Size keysize)
{
	*(char **) dest = MemoryContextStrdup(policy_context, *(char *const *) src);
	return dest;
}

static void
reset_cache(void)
{
	static bool callbacks_registered = false;
	HASHCTL		ctl;

	if (!callbacks_registered)
	{
		CacheRegisterRelcacheCallback(forget_policies, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, forget_policies_on_proc_change,
									  (Datum) 0);
		callbacks_registered = true;
	}
	if (policy_context == NULL)
		policy_context = AllocSetContextCreate(CacheMemoryContext,
											   "ratelimit policies",
											   ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(policy_context);
	last_entry = NULL;

	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(PolicyEntry);
	ctl.hash = limiter_hash;
	ctl.match = limiter_match;
	ctl.keycopy = limiter_copy;
	ctl.hcxt = policy_context;
	policies = hash_create("ratelimit policies", 16, &ctl,
						   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
						   HASH_KEYCOPY | HASH_CONTEXT);
	cache_valid = true;
}

/* rl_policies next to SQL function fn_oid, or InvalidOid */
static Oid
find_policies(Oid fn_oid)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn_oid));
	Oid			relid;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn_oid);
	relid = get_relname_relid("rl_policies",
							  ((Form_pg_proc) GETSTRUCT(tuple))->pronamespace);
	ReleaseSysCache(tuple);
	return relid;
}

/*
 * An interval in microseconds as PostgreSQL compares intervals (a month is
 * 30 days, a day 24 hours), which is how rl_policies' checks bound it; a
 * value beyond the int64 range saturates (the checks refuse it anyway).
 */
static int64
interval_us(const Interval *span)
{
	__int128	us = (__int128) span->time +
		((__int128) span->month * DAYS_PER_MONTH + span->day) * USECS_PER_DAY;

	return us > PG_INT64_MAX ? PG_INT64_MAX : us < PG_INT64_MIN ? PG_INT64_MIN : (int64) us;
}

/* A 1.3 row's lockout columns (a NULL lockout: none; 0 as in GcraLimit). */
static void
read_lockout(HeapTuple tuple, TupleDesc desc, Policy *policy)
{
	bool		isnull;
	Datum		value;

	value = heap_getattr(tuple, ATT_LOCKOUT, desc, &isnull);
	if (isnull)
		return;
	policy->lockout_us = interval_us(DatumGetIntervalP(value));
	policy->lockout_growth = DatumGetFloat8(heap_getattr(tuple, ATT_LOCKOUT_GROWTH,
														 desc, &isnull));
	value = heap_getattr(tuple, ATT_LOCKOUT_MAX, desc, &isnull);
	policy->lockout_max_us = isnull ? 0 : interval_us(DatumGetIntervalP(value));
}

/*
 * Read the policy of limiter from the table.  The newest committed version,
 * whatever the caller's snapshot, taken once both locks are held: their
 * first acquisitions process invalidations, and one already processed must
 * not be followed by an older version in the cache.
 */
static bool
read_policy(Oid relid, const char *limiter, Policy *policy)
{
	Relation	rel = try_table_open(relid, AccessShareLock);
	Relation	index;
	Snapshot	snapshot;
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	/* dropped by a DROP EXTENSION that this call waited for: find it again */
	if (rel == NULL)
	{
		policies_found = false;
		refuse_dropped_table("rl_policies");
	}
	if ((RelationGetDescr(rel)->natts != POLICY_NATTS_1_1 &&
		 RelationGetDescr(rel)->natts != POLICY_NATTS) ||
		!OidIsValid(rl_primary_key_index(rel)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"rl_policies\" is not the one ratelimit created")));
	index = index_open(rl_primary_key_index(rel), AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ,
						   CStringGetTextDatum(limiter));
	scan = systable_beginscan_ordered(rel, index, snapshot, 1, &skey);
	tuple = systable_getnext_ordered(scan, ForwardScanDirection);
	if (HeapTupleIsValid(tuple))
	{
		TupleDesc	desc = RelationGetDescr(rel);
		bool		isnull;

		policy->rate = DatumGetFloat8(heap_getattr(tuple, ATT_RATE, desc, &isnull));
		policy->burst = DatumGetInt32(heap_getattr(tuple, ATT_BURST, desc, &isnull));
		policy->shadow = DatumGetBool(heap_getattr(tuple, ATT_SHADOW, desc, &isnull));
		if (desc->natts == POLICY_NATTS)
		{
			read_lockout(tuple, desc, policy);
			policy->durable = DatumGetBool(heap_getattr(tuple, ATT_DURABLE,
														desc, &isnull));
		}
		found = true;
	}
	systable_endscan_ordered(scan);
	UnregisterSnapshot(snapshot);
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The cache's entry for limiter, read from the table of the extension that
 * SQL function fn_oid belongs to when the cache does not know the name.
 */
static const PolicyEntry *
cached_policy(Oid fn_oid, text *limiter)
{
	int			length = VARSIZE_ANY_EXHDR(limiter);
	char	   *name;
	PolicyEntry *entry;
	Policy		policy = {0};
	bool		exists;
	bool		found;
	uint64		invalidations_seen;

	/*
	 * A change committed since the last call, in this transaction too: a hit
	 * takes no lock whose acquisition would accept it.  Cheap when nothing is
	 * queued.
	 */
	AcceptInvalidationMessages();
	if (!cache_valid)
		reset_cache();
	if (last_entry != NULL && last_entry->length == length &&
		memcmp(last_entry->limiter, VARDATA_ANY(limiter), length) == 0)
		return last_entry;
	name = text_to_cstring(limiter);
	entry = hash_search(policies, &name, HASH_FIND, NULL);
	if (entry != NULL)
	{
		pfree(name);
		last_entry = entry;
		return entry;
	}

	/*
	 * An invalidation processed while the table is found or read may be of a
	 * change the read did not see: read again until none arrives meanwhile.
	 */
	do
	{
		invalidations_seen = policy_invalidations;
		if (!policies_found)
		{
			policies_relid = find_policies(fn_oid);
			policies_found = true;
		}
		exists = OidIsValid(policies_relid) &&
			read_policy(policies_relid, name, &policy);
	} while (policy_invalidations != invalidations_seen);

	/* reading the table may have processed an invalidation */
	if (!cache_valid || hash_get_num_entries(policies) >= MAX_CACHED_LIMITERS)
		reset_cache();
	entry = hash_search(policies, &name, HASH_ENTER, &found);
	entry->length = length;
	entry->exists = exists;
	entry->policy = policy;
	pfree(name);
	last_entry = entry;
	return entry;
}

/* The policy of limiter; an unknown limiter is an error naming it. */
Policy
policy_lookup(Oid fn_oid, text *limiter)
{
	const PolicyEntry *entry = cached_policy(fn_oid, limiter);

	if (!entry->exists)
	{
		if (!OidIsValid(policies_relid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("table \"rl_policies\" of ratelimit is missing"),
					 errhint("ALTER EXTENSION ratelimit UPDATE creates it.")));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("limiter \"%s\" has no policy", entry->limiter),
				 errhint("Add it to rl_policies, or pass rate and burst explicitly.")));
	}
	return entry->policy;
}

/*
 * The table the buckets of limiter live in when they are not in memory: a
 * durable policy's, or rl_buckets (a limiter without a policy included).
 */
BucketTable
limiter_table(Oid fn_oid, text *limiter)
{
	const PolicyEntry *entry = cached_policy(fn_oid, limiter);

	return policy_table(entry->exists ? &entry->policy : NULL);
}

/*
 * The explicit forms (rate and burst as arguments) are for limiters without
 * a policy: a limiter with one is decided by it only, or any caller could
 * change its limit, and by the limit-change rule reset every budget of it.
 * policy_form names the call to use instead.
 */
void
policy_refuse_explicit(Oid fn_oid, text *limiter, const char *function,
					   const char *policy_form)
{
	const PolicyEntry *entry = cached_policy(fn_oid, limiter);

	if (entry->exists)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("limiter \"%s\" has a policy: %s cannot set its limit",
						entry->limiter, function),
				 errdetail("A limiter with a row in rl_policies is decided by its policy only."),
				 errhint("Call %s, the policy form.", policy_form)));
}

/*
 * The limit of policy for a decision at now, or an error naming what the
 * policy's row holds that the formula cannot use (the checks of
 * rl_policies refuse it, unless the table was changed by hand).
 */
void
policy_limit(const Policy *policy, int64 now, int32 cost, GcraLimit *limit)
{
	GcraError	error;

	error = gcra_limit_init(limit, policy->rate, policy->burst, now,
							END_TIMESTAMP - 1);
	if (error == GCRA_OK && policy->lockout_us > 0)
		error = gcra_lockout_init(limit, policy->lockout_us,
								  policy->lockout_growth,
								  policy->lockout_max_us, now,
								  END_TIMESTAMP - 1);
	if (error == GCRA_OK && cost < 0)
		error = GCRA_BAD_COST;
	if (error != GCRA_OK)
		refuse_limit(error, policy->rate, policy->burst, cost);
}

/*
 * A decision by the policy of limiter for SQL function fn_oid named
 * function, at time at (DECIDE_NOW: the server clock): the body of
 * rl_take(limiter, key, cost), its rl_take_at and rl_guard.
 */
GcraDecision
policy_take(Oid fn_oid, const char *function, text *limiter, text *key,
			int32 cost, int64 at, Policy *policy)
{
	GcraLimit	limit;
	GcraDecision d;

	*policy = policy_lookup(fn_oid, limiter);
	policy_limit(policy, decision_time(at), cost,
				 &limit);
	d = store_take(fn_oid, function, policy_table(policy),
				   bucket_key(limiter, key), &limit, at, cost);
	if (cost > 0)				/* a peek is not a decision: not counted */
		stats_count(limiter, &d, policy->shadow);
	return d;
}

/*
 * The body of rl_take(limiter, key, cost) and of rl_take_at(limiter, key,
 * cost, at) when has_at: every argument checked in their order.
 */
static Datum
take_by_policy(FunctionCallInfo fcinfo, const char *function, bool has_at)
{
	text	   *limiter = required_text_argument(fcinfo, 0, "limiter");
	text	   *key = required_text_argument(fcinfo, 1, "key");
	int32		cost;
	int64		at = DECIDE_NOW;
	Policy		policy;
	GcraDecision d;

	require_argument(fcinfo, 2, "cost");
	cost = PG_GETARG_INT32(2);
	if (has_at)
		at = required_time_argument(fcinfo, 3, "at");
	d = policy_take(fcinfo->flinfo->fn_oid, function, limiter, key, cost, at,
					&policy);
	PG_RETURN_DATUM(decision_datum(fcinfo, &d, policy.shadow));
}

/* rl_take(limiter, key, cost): decide by the limiter's policy */
Datum
rl_take_policy(PG_FUNCTION_ARGS)
{
	return take_by_policy(fcinfo, "rl_take", false);
}

/* rl_take_at(limiter, key, cost, at): by the policy, at a given time */
Datum
rl_take_at_policy(PG_FUNCTION_ARGS)
{
	return take_by_policy(fcinfo, "rl_take_at", true);
}

/*
 * Trigger on rl_policies, per statement and per row (logical replication's
 * apply worker fires row triggers only): every backend's cache is emptied
 * when the change commits.  The invalidations of one transaction are one.
 */
Datum
rl_policies_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_policies_changed must be called as a trigger")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	PG_RETURN_POINTER(NULL);
}
