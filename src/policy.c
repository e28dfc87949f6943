/*
 * policy.c
 *		Named limits: the rl_policies table, cached in every backend, and
 *		rl_take(limiter, key, cost) by the limiter's policy.
 *
 * A policy call must cost no more than the explicit one, so policies are not
 * read from the table on every call: each backend keeps the ones it used.  A
 * statement trigger on rl_policies queues a relcache invalidation of the
 * table, which PostgreSQL delivers to every backend when the change commits
 * (and to nobody when it rolls back); the relcache callback here then empties
 * the cache, and the next call reads the table again.
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
PG_FUNCTION_INFO_V1(rl_policies_changed);

/* rl_policies columns */
#define ATT_LIMITER 1
#define ATT_RATE 2
#define ATT_BURST 3
#define ATT_SHADOW 4
#define POLICY_NATTS 4

typedef struct PolicyEntry
{
	char	   *limiter;		/* hash key: a NUL-terminated copy */
	Policy		policy;
} PolicyEntry;

/* rl_policies' OID, InvalidOid until found or after it changed */
static Oid	policies_relid = InvalidOid;

/* the cache, in its own context; reset when cache_valid is false */
static MemoryContext policy_context = NULL;
static HTAB *policies = NULL;
static bool cache_valid = false;

/* An invalidation may arrive at any time: only mark, empty on next use. */
static void
forget_policies(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == policies_relid)
	{
		cache_valid = false;
		policies_relid = InvalidOid;
	}
}

static void
forget_policies_on_proc_change(Datum arg, int cacheid, uint32 hashvalue)
{
	/* DROP and CREATE EXTENSION make another table */
	cache_valid = false;
	policies_relid = InvalidOid;
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
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table \"rl_policies\" of ratelimit is missing"),
				 errhint("ALTER EXTENSION ratelimit UPDATE creates it.")));
	return relid;
}

/*
 * Read the policy of limiter from the table.  The newest committed version,
 * whatever the caller's snapshot: an invalidation already processed must not
 * be followed by an older version in the cache.
 */
static bool
read_policy(Oid relid, const char *limiter, Policy *policy)
{
	Relation	rel = table_open(relid, AccessShareLock);
	Relation	index;
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	if (RelationGetDescr(rel)->natts != POLICY_NATTS ||
		!OidIsValid(rl_primary_key_index(rel)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"rl_policies\" is not the one ratelimit created")));
	index = index_open(rl_primary_key_index(rel), AccessShareLock);
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
		found = true;
	}
	systable_endscan_ordered(scan);
	UnregisterSnapshot(snapshot);
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The policy of limiter, from this backend's cache or the table of the
 * extension that SQL function fn_oid belongs to.  An unknown limiter is an
 * error naming it.
 */
Policy
policy_lookup(Oid fn_oid, text *limiter)
{
	char	   *name = text_to_cstring(limiter);
	PolicyEntry *entry;
	Policy		policy;
	bool		found;

	if (!cache_valid)
		reset_cache();
	entry = hash_search(policies, &name, HASH_FIND, NULL);
	if (entry != NULL)
		return entry->policy;

	if (!OidIsValid(policies_relid))
		policies_relid = find_policies(fn_oid);
	if (!read_policy(policies_relid, name, &policy))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("limiter \"%s\" has no policy", name),
				 errhint("Add it to rl_policies, or pass rate and burst explicitly.")));

	/* reading the table may have processed an invalidation */
	if (!cache_valid)
		reset_cache();
	entry = hash_search(policies, &name, HASH_ENTER, &found);
	entry->policy = policy;
	return policy;
}

/* rl_take(limiter, key, cost): decide by the limiter's policy */
Datum
rl_take_policy(PG_FUNCTION_ARGS)
{
	text	   *limiter = required_text_argument(fcinfo, 0, "limiter");
	text	   *key = required_text_argument(fcinfo, 1, "key");
	TimestampTz now = GetCurrentTimestamp();
	int32		cost;
	Policy		policy;
	GcraLimit	limit;
	GcraError	error;
	GcraDecision d;

	require_argument(fcinfo, 2, "cost");
	cost = PG_GETARG_INT32(2);
	policy = policy_lookup(fcinfo->flinfo->fn_oid, limiter);

	error = gcra_limit_init(&limit, policy.rate, policy.burst, now,
							END_TIMESTAMP - 1);
	if (error == GCRA_OK && cost < 0)
		error = GCRA_BAD_COST;
	if (error != GCRA_OK)
		refuse_limit(error, policy.rate, policy.burst, cost);

	d = store_take(fcinfo->flinfo->fn_oid, "rl_take", bucket_key(limiter, key),
				   &limit, DECIDE_NOW, cost);
	stats_count(limiter, &d, policy.shadow);
	PG_RETURN_DATUM(decision_datum(fcinfo, &d, policy.shadow));
}

/*
 * Statement trigger on rl_policies: every backend's cache is emptied when
 * the change commits.
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
