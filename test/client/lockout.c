/*
 * lockout.c
 *		Lockouts by policy: a key the database locked is refused by the
 *		pre-check without a round trip, and by the fallback during an
 *		outage, until the lock ends, with the lock's remainder as
 *		retry_after; a database at extension 1.2 (no lockout columns) is
 *		still decided by policy.
 *
 * Usage: lockout CONNINFO CONNINFO_12
 *	CONNINFO_12 is a database with ratelimit 1.2.  Steps: "stop" stops the
 *	server.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define DEADLINE_MS 1000
#define BACKOFF_MS 60000

static RlDecision
take(RlClient *client, const char *key)
{
	RlDecision	d;

	if (rl_client_take_policy(client, "signin", key, 1, &d) != RL_OK)
		d.source = (RlSource) -1;
	return d;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	RlClient   *client;
	RlClient   *client_12;
	RlDecision	d;
	int			i;

	tap_start(argc, argv, 2, "CONNINFO CONNINFO_12");
	rl_client_options_init(&options);
	options.deadline_ms = DEADLINE_MS;
	options.backoff_ms = BACKOFF_MS;

	/* a database at 1.2: the policy copy without lockout columns */
	options.conninfo = argv[2];
	is_int(rl_client_new(&options, &client_12), RL_OK, "a client of the 1.2 database is made");
	d = take(client_12, "ada");
	ok(d.allowed && d.source == RL_SOURCE_DATABASE,
	   "a 1.2 database decides by policy (source %d)", (int) d.source);
	rl_client_stats(client_12, &stats);
	is_int(stats.policy_reads, 1, "its policies were read");
	rl_client_free(client_12);

	options.conninfo = argv[1];
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	/* signin: 1 per hour, burst 2, a lockout of 600 s */
	for (i = 0; i < 2; i++)
	{
		d = take(client, "ada");
		ok(d.allowed && d.source == RL_SOURCE_DATABASE, "ada's call %d is allowed by the database", i + 1);
	}
	d = take(client, "ada");
	ok(!d.allowed && d.source == RL_SOURCE_DATABASE && fabs(d.retry_after - 600) < 1,
	   "the 3rd is denied by the database and starts a lockout of 600 s (retry_after %.3f)",
	   d.retry_after);

	d = take(client, "ada");
	ok(!d.allowed && d.source == RL_SOURCE_LOCAL && d.retry_after <= 600 &&
	   d.retry_after > 595 && d.remaining == 0,
	   "the next is refused by the pre-check, the lock's remainder as retry_after (%.3f, source %d)",
	   d.retry_after, (int) d.source);
	rl_client_stats(client, &stats);
	is_int(stats.database, 3, "it made no round trip");

	step("stop");
	d = take(client, "bob");
	ok(d.allowed && d.source == RL_SOURCE_FALLBACK, "bob, not locked, is allowed in memory (the database failed: its backoff starts)");
	d = take(client, "bob");
	ok(d.allowed, "bob's 2nd is allowed in memory");
	d = take(client, "bob");
	ok(!d.allowed && fabs(d.retry_after - 600) < 1,
	   "bob's 3rd is denied in memory and starts a lockout of 600 s (retry_after %.3f)",
	   d.retry_after);
	d = take(client, "ada");
	ok(!d.allowed && d.source == RL_SOURCE_FALLBACK && d.retry_after < 599.99 &&
	   d.retry_after > 595,
	   "during the outage, the fallback keeps the database's lock, not one of its own (retry_after %.3f, source %d)",
	   d.retry_after, (int) d.source);
	rl_client_free(client);

	return done_testing();
}
