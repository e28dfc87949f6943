/*
 * partitions.c
 *		A client pointed at a ratelimit_proxy of two shards, one of which
 *		stops: with partitions set, only the stopped shard's keys fall back
 *		to memory, the other shard's keys are still decided by the database,
 *		and a multi-limit call falls back when any of its keys' shards is in
 *		its backoff.  When the shard is back, its keys return to the
 *		database after the backoff.  Calls by policy read rl_policies from
 *		the proxy as from one server, so the stopped shard's keys are
 *		decided in memory by the policy read.
 *
 * Usage: partitions CONNINFO PARTITIONS KEY_ON_0 OTHER_KEY_ON_0 KEY_ON_1 LONG_KEY
 *		LONG_KEY_HASH (the proxy's rl_shard_hash('sign_in', LONG_KEY))
 *		POLICY_KEY_ON_0 POLICY_KEY_ON_1 (the shards of "sign_in_p")
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define HOURLY (1.0 / 3600)
#define BACKOFF_MS 300

static RlClient *client;

static RlSource
take(const char *key)
{
	RlDecision	d;

	if (rl_client_take(client, "sign_in", key, HOURLY, 100, 1, &d) != RL_OK)
		return (RlSource) -1;
	return d.source;
}

/* by the policy "sign_in_p"; *allowed as decided */
static RlSource
take_policy(const char *key, bool *allowed)
{
	RlDecision	d;

	if (rl_client_take_policy(client, "sign_in_p", key, 1, &d) != RL_OK)
		return (RlSource) -1;
	*allowed = d.allowed;
	return d.source;
}

static RlSource
take_all(const char *key1, const char *key2)
{
	RlRequest	requests[2] = {
		{.limiter = "sign_in", .key = key1, .rate = HOURLY, .burst = 100, .cost = 1},
		{.limiter = "sign_in", .key = key2, .rate = HOURLY, .burst = 100, .cost = 1}};
	RlDecisionAll d;

	if (rl_client_take_all(client, requests, 2, &d) != RL_OK)
		return (RlSource) -1;
	return d.source;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	Warnings	warnings = {.lock = PTHREAD_MUTEX_INITIALIZER};
	const char *on0;
	const char *other0;
	const char *on1;
	const char *policy_on0;
	const char *policy_on1;
	int			database;
	int			fallback;
	double		start;
	RlSource	s;
	bool		allowed;
	int			i;
	RlClient	wide = {.partitions = 65536};	/* for rl_partition alone */

	tap_start(argc, argv, 9,
			  "CONNINFO PARTITIONS KEY_ON_0 OTHER_KEY_ON_0 KEY_ON_1 LONG_KEY LONG_KEY_HASH"
			  " POLICY_KEY_ON_0 POLICY_KEY_ON_1");
	on0 = argv[3];
	other0 = argv[4];
	on1 = argv[5];
	policy_on0 = argv[8];
	policy_on1 = argv[9];
	/* the proxy's hash, over several SHA-256 blocks */
	is_int(rl_partition(&wide, "sign_in", argv[6]), atol(argv[7]) % 65536,
		   "the client's partition of a %zu-byte key is the proxy's", strlen(argv[6]));
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.partitions = atoi(argv[2]);
	options.deadline_ms = 5000;
	options.backoff_ms = BACKOFF_MS;
	options.warning = warnings_record;
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &client), RL_OK, "a client with partitions = %d is made",
		   options.partitions);

	is_int(take(on0), RL_SOURCE_DATABASE, "shard 0's key is decided by the database");
	is_int(take(on1), RL_SOURCE_DATABASE, "shard 1's key is decided by the database");
	is_int(take_policy(policy_on0, &allowed), RL_SOURCE_DATABASE,
		   "by policy: shard 0's key is decided by the database");
	is_int(take_policy(policy_on1, &allowed), RL_SOURCE_DATABASE, "and shard 1's key");
	rl_client_stats(client, &stats);
	ok(stats.policy_reads == 1 && stats.fallback == 0,
	   "the proxy served rl_policies, read once (%llu reads, %llu fallbacks)",
	   (unsigned long long) stats.policy_reads, (unsigned long long) stats.fallback);

	step("stop");

	/* a failing key first, then the others, in turn: ten backoff intervals */
	database = fallback = 0;
	for (i = 0; i < 30; i++)
	{
		fallback += take(on1) == RL_SOURCE_FALLBACK;
		database += take(on0) == RL_SOURCE_DATABASE;
		database += take(other0) == RL_SOURCE_DATABASE;
		sleep_ms(BACKOFF_MS / 3);
	}
	is_int(fallback, 30, "shard 1 stopped: each of its key's 30 calls falls back to memory");
	is_int(database, 60, "each of 60 calls for shard 0's keys is still decided by the database");
	is_int(take_all(on0, other0), RL_SOURCE_DATABASE,
		   "a multi-limit call on shard 0's keys is decided by the database");
	is_int(take_all(on0, on1), RL_SOURCE_FALLBACK,
		   "a multi-limit call with a key of shard 1 falls back to memory");
	/* shard 1's probe is due: the multi-limit call is the one that fails */
	sleep_ms(BACKOFF_MS + 50);
	is_int(take_all(on0, on1), RL_SOURCE_FALLBACK,
		   "a multi-limit call that probes shard 1 falls back to memory");
	is_int(take(other0), RL_SOURCE_DATABASE,
		   "and shard 0's keys go on to the database: the failure backs off shard 1 only");
	is_int(take(on1), RL_SOURCE_FALLBACK, "while shard 1's key falls back");
	is_int(warnings_for(&warnings, "sign_in"), 1, "one warning for the limiter");
	ok(strstr(warnings.last, "(error: ") != NULL, "naming the error: %s", warnings.last);
	rl_client_stats(client, &stats);
	ok(stats.fallback_error >= 33 && stats.fallback == stats.fallback_error,
	   "counters: %llu fallbacks, all for an error",
	   (unsigned long long) stats.fallback);
	{
		RlDecision	d;
		RlStatus	status = rl_client_take_policy(client, "sign_in_p", policy_on1, 1, &d);

		if (!ok(status == RL_OK && d.source == RL_SOURCE_FALLBACK && d.allowed,
				"by policy, shard 1's key is decided in memory by the policy read: allowed"))
			diag("status %d (%s), source %d, allowed %d", (int) status,
				 rl_status_message(status), (int) d.source, (int) d.allowed);
	}
	rl_client_stats(client, &stats);
	is_int((int) stats.no_policy, 0, "no call was refused for want of a policy");

	step("start");

	start = now_ms();
	do
	{
		s = take(on1);
		sleep_ms(10);
	} while (s != RL_SOURCE_DATABASE && now_ms() - start < 10000);
	is_int(s, RL_SOURCE_DATABASE, "shard 1 back: its key returns to the database (after %.0f ms)",
		   now_ms() - start);
	is_int(take_all(on0, on1), RL_SOURCE_DATABASE,
		   "and so does a multi-limit call over both shards");

	rl_client_free(client);
	return done_testing();
}
