/*
 * eviction.c
 *		The key bound: memory never holds more than max_keys buckets.  Full
 *		buckets (the same as absent ones) go first, then the least recently
 *		used; a key that needs room is still decided on a bucket of its own,
 *		never allowed for want of one.
 *
 * Usage: eviction CONNINFO
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define HOURLY (1.0 / 3600)

static bool
allowed(RlClient *client, const char *key, double rate, RlSource source)
{
	RlDecision	d;

	if (rl_client_take(client, "evict", key, rate, 1, 1, &d) != RL_OK ||
		d.source != source)
	{
		diag("%s: not decided by source %d", key, (int) source);
		return true;			/* counts against the test */
	}
	return d.allowed;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;
	RlClientStats stats;
	char		key[32];
	int			granted;
	int			denied;
	int			i;
	int			round;

	tap_start();
	if (argc != 2)
	{
		fprintf(stderr, "usage: %s CONNINFO\n", argv[0]);
		return 2;
	}

	/* with the database: 40 keys through 8 buckets, decisions stay exact */
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.max_keys = 8;
	is_int(rl_client_new(&options, &client), RL_OK, "a client with max_keys 8");
	granted = 0;
	for (round = 0; round < 3; round++)
	{
		for (i = 0; i < 40; i++)
		{
			RlDecision	d;

			snprintf(key, sizeof(key), "db-%d", i);
			if (rl_client_take(client, "evict", key, HOURLY, 2, 1, &d) == RL_OK &&
				d.source == RL_SOURCE_DATABASE)
				granted += d.allowed;
		}
	}
	is_int(granted, 80, "40 keys x 3 calls, burst 2: the database allows exactly 80");
	rl_client_stats(client, &stats);
	is_int(stats.keys, 8, "memory holds 8 keys");
	is_int(stats.evictions, 120 - 8, "every call on an absent key evicted one: 112");
	rl_client_free(client);

	step("stop");

	/* in memory: A and B are spent for an hour, F1 and F2 are full in 1 us */
	options.max_keys = 4;
	is_int(rl_client_new(&options, &client), RL_OK, "a client with max_keys 4, its server down");
	ok(allowed(client, "A", HOURLY, RL_SOURCE_FALLBACK) &&
	   allowed(client, "B", HOURLY, RL_SOURCE_FALLBACK) &&
	   allowed(client, "F1", 1000000, RL_SOURCE_FALLBACK) &&
	   allowed(client, "F2", 1000000, RL_SOURCE_FALLBACK),
	   "A, B, F1 and F2 take their burst of 1, in that order");
	sleep_ms(5);
	ok(allowed(client, "N1", HOURLY, RL_SOURCE_FALLBACK) &&
	   allowed(client, "N2", HOURLY, RL_SOURCE_FALLBACK),
	   "N1 and N2 take theirs");
	rl_client_stats(client, &stats);
	ok(stats.keys == 4 && stats.evictions == 2, "memory holds 4 keys, after 2 evictions");
	ok(!allowed(client, "A", HOURLY, RL_SOURCE_FALLBACK) &&
	   !allowed(client, "B", HOURLY, RL_SOURCE_FALLBACK),
	   "A and B, the least recently used, are still denied: the full F1 and F2 went first");

	/* none full now: the least recently used (N1) goes */
	ok(allowed(client, "N3", HOURLY, RL_SOURCE_FALLBACK), "N3 takes its burst of 1");
	ok(!allowed(client, "N2", HOURLY, RL_SOURCE_FALLBACK) &&
	   !allowed(client, "A", HOURLY, RL_SOURCE_FALLBACK) &&
	   !allowed(client, "B", HOURLY, RL_SOURCE_FALLBACK) &&
	   !allowed(client, "N3", HOURLY, RL_SOURCE_FALLBACK),
	   "N2, A, B and N3 are denied: N1, the least recently used, made room");
	rl_client_stats(client, &stats);
	ok(stats.keys == 4 && stats.evictions == 3, "memory holds 4 keys, after 3 evictions");

	/* 100 new keys at the bound: each gets its burst, no more */
	granted = denied = 0;
	for (i = 0; i < 100; i++)
	{
		snprintf(key, sizeof(key), "K%d", i);
		granted += allowed(client, key, HOURLY, RL_SOURCE_FALLBACK);
		denied += !allowed(client, key, HOURLY, RL_SOURCE_FALLBACK);
		denied += !allowed(client, "A", HOURLY, RL_SOURCE_FALLBACK);
	}
	is_int(granted, 100, "100 new keys at the bound: each is allowed its burst of 1");
	is_int(denied, 200, "then denied, and A, used all along, stays denied: nothing fails open");
	rl_client_stats(client, &stats);
	is_int(stats.keys, 4, "memory still holds 4 keys");
	rl_client_free(client);
	return done_testing();
}
