/*
 * eviction.c
 *		The key bound: memory never holds more than max_keys buckets, and it
 *		never fails open to make room.  With the database up, a new key at
 *		the bound is decided by the database, and its bucket then takes the
 *		place of the least recently used one.  While the in-memory limiter
 *		decides, only buckets that are full again make room; a key without
 *		room is refused until one is.
 *
 * Usage: eviction CONNINFO
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define HOURLY (1.0 / 3600)
#define HAMMER_KEYS 10
#define HAMMER_MAX_KEYS 4
#define HAMMER_BURST 2
/*
 * The seconds after which F1 and F2 are full again: long enough that no
 * delay of a loaded machine between their calls and N1's fills them early.
 */
#define REFILL_S 5

/* One call of cost 1 on the limiter "evict"; source -1 on an error status. */
static RlDecision
take(RlClient *client, const char *key, double rate, int32_t burst)
{
	RlDecision	d;

	if (rl_client_take(client, "evict", key, rate, burst, 1, &d) != RL_OK)
		d.source = (RlSource) -1;
	return d;
}

/* Allowed in memory (the server is down). */
static bool
allowed(RlClient *client, const char *key, double rate)
{
	RlDecision	d = take(client, key, rate, 1);

	return d.allowed && d.source == RL_SOURCE_FALLBACK;
}

/* Denied in memory. */
static bool
denied(RlClient *client, const char *key)
{
	RlDecision	d = take(client, key, HOURLY, 1);

	return !d.allowed && d.source == RL_SOURCE_FALLBACK;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;
	RlClientStats stats;
	RlDecision	d;
	char		key[32];
	int			granted;
	int			by_database;
	int			per_key[HAMMER_KEYS] = {0};
	int			not_memory;
	int			rounds;
	int			wrong;
	double		start;
	int			i;
	int			round;

	tap_start(argc, argv, 1, "CONNINFO");

	/*
	 * With the database: 40 keys through 8 buckets.  Each call finds its
	 * key forgotten, is decided by the database all the same, and then
	 * takes the place of the least recently used key.
	 */
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	/* not the deadline under test: room for a loaded machine's first connection */
	options.deadline_ms = 5000;
	options.max_keys = 8;
	is_int(rl_client_new(&options, &client), RL_OK, "a client with max_keys 8");
	granted = by_database = 0;
	for (round = 0; round < 3; round++)
	{
		for (i = 0; i < 40; i++)
		{
			snprintf(key, sizeof(key), "db-%d", i);
			d = take(client, key, HOURLY, 2);
			by_database += d.source == RL_SOURCE_DATABASE;
			granted += d.allowed;
		}
	}
	is_int(by_database, 120, "40 keys x 3 calls at max_keys 8: all 120 decided by the database");
	is_int(granted, 80, "burst 2: the database allows exactly 80");
	rl_client_stats(client, &stats);
	is_int(stats.keys, 8, "memory holds 8 keys");
	is_int(stats.evictions, 120 - 8, "every call on an absent key evicted one: 112");
	is_int(stats.no_room, 0, "no call was refused for want of room");
	rl_client_free(client);

	step("stop");

	/*
	 * In memory: A and B are spent for an hour, F1 and F2 are full again
	 * REFILL_S seconds after their call.  No backoff ends
	 * within this part: the in-memory limiter decides every call.
	 */
	options.max_keys = 4;
	options.backoff_ms = 600000;
	is_int(rl_client_new(&options, &client), RL_OK, "a client with max_keys 4, its server down");
	ok(allowed(client, "A", HOURLY) && allowed(client, "B", HOURLY) &&
	   allowed(client, "F1", 1.0 / REFILL_S) && allowed(client, "F2", 1.0 / REFILL_S),
	   "A, B, F1 and F2 take their burst of 1, in that order");
	d = take(client, "N1", HOURLY, 1);
	ok(!d.allowed && d.source == RL_SOURCE_FALLBACK && d.remaining == 0,
	   "N1, a fifth key, is refused in memory: every bucket is live");
	ok(d.retry_after > 0 && d.retry_after <= REFILL_S && d.reset_after == d.retry_after,
	   "N1 may retry when F1 is full again, within %d s (retry_after %.3f s)",
	   REFILL_S, d.retry_after);
	ok(denied(client, "A") && denied(client, "B"),
	   "A and B, the least recently used, are still denied: nothing was forgotten");
	rl_client_stats(client, &stats);
	ok(stats.keys == 4 && stats.evictions == 0 && stats.no_room == 1,
	   "memory holds 4 keys, none evicted, one refusal for want of room");

	/* F2's call came before N1's: both are full REFILL_S after N1's */
	sleep_ms(REFILL_S * 1000 + 20);
	ok(allowed(client, "N1", HOURLY) && allowed(client, "N2", HOURLY),
	   "once F1 and F2 are full again, N1 and N2 take their places and their burst");
	rl_client_stats(client, &stats);
	ok(stats.keys == 4 && stats.evictions == 2, "memory holds 4 keys, after 2 evictions");

	d = take(client, "N3", HOURLY, 1);
	ok(!d.allowed && d.source == RL_SOURCE_FALLBACK && d.remaining == 0,
	   "N3 is refused in memory: A, B, N1 and N2 are live");
	ok(d.retry_after > 3600 - 4 * REFILL_S && d.retry_after <= 3600 && d.reset_after == d.retry_after,
	   "N3 may retry when A is full again, an hour after its call (retry_after %.1f s)",
	   d.retry_after);
	ok(rl_client_take(client, "evict", "N3", HOURLY, 1, 2, &d) == RL_OK &&
	   !d.allowed && isinf(d.retry_after),
	   "N3 at cost 2 > burst 1 is refused with retry_after INFINITY, as ever");
	ok(denied(client, "A") && denied(client, "B") &&
	   denied(client, "N1") && denied(client, "N2"),
	   "A, B, N1 and N2 stay denied");
	rl_client_stats(client, &stats);
	ok(stats.keys == 4 && stats.evictions == 2 && stats.no_room == 3,
	   "memory holds 4 keys, after 2 evictions and 3 refusals for want of room");
	rl_client_free(client);

	/*
	 * 10 keys hammered in turn at max_keys 4, burst 2, for half a second
	 * and 100 rounds at least, with a backoff of 10 ms: the database is
	 * tried again and again (by keys with and without a bucket), and every
	 * call is decided in memory.  The first four keys seen keep their
	 * buckets and get their burst; the six others get nothing, ever.
	 */
	options.max_keys = HAMMER_MAX_KEYS;
	options.backoff_ms = 10;
	is_int(rl_client_new(&options, &client), RL_OK,
		   "a client with max_keys %d and a backoff of 10 ms, its server down",
		   HAMMER_MAX_KEYS);
	rounds = not_memory = 0;
	start = now_ms();
	while (rounds < 100 || now_ms() - start < 500)
	{
		for (i = 0; i < HAMMER_KEYS; i++)
		{
			snprintf(key, sizeof(key), "K%d", i);
			d = take(client, key, HOURLY, HAMMER_BURST);
			per_key[i] += d.allowed;
			not_memory += d.source != RL_SOURCE_FALLBACK && d.source != RL_SOURCE_LOCAL;
		}
		rounds++;
		sleep_ms(1);
	}
	is_int(not_memory, 0, "%d rounds x %d keys: all decided in memory", rounds, HAMMER_KEYS);
	granted = wrong = 0;
	for (i = 0; i < HAMMER_KEYS; i++)
	{
		granted += per_key[i];
		if (per_key[i] != (i < HAMMER_MAX_KEYS ? HAMMER_BURST : 0))
		{
			diag("K%d: %d allowed", i, per_key[i]);
			wrong++;
		}
	}
	is_int(wrong, 0, "K0 to K3 are allowed their burst of %d each, K4 to K9 nothing",
		   HAMMER_BURST);
	is_int(granted, HAMMER_MAX_KEYS * HAMMER_BURST,
		   "%d allowed in all: max_keys x burst, never more", HAMMER_MAX_KEYS * HAMMER_BURST);
	ok(!d.allowed && d.retry_after > 7190 && d.retry_after <= 4 * 3600,
	   "K9 may retry when the first of K0 to K3 is full again, in 2 to 4 hours (retry_after %.0f s)",
	   d.retry_after);
	rl_client_stats(client, &stats);
	is_int(stats.no_room, (HAMMER_KEYS - HAMMER_MAX_KEYS) * rounds,
		   "every call of K4 to K9 was counted as refused for want of room");
	ok(stats.keys == HAMMER_MAX_KEYS && stats.evictions == 0,
	   "memory holds %d keys, none evicted", HAMMER_MAX_KEYS);

	step("start");

	/* K9 has no bucket: its call tries the database, which then decides */
	start = now_ms();
	do
	{
		d = take(client, "K9", HOURLY, HAMMER_BURST);
		sleep_ms(10);
	} while (d.source != RL_SOURCE_DATABASE && now_ms() - start < 5000);
	ok(d.source == RL_SOURCE_DATABASE && d.allowed && d.remaining == 1,
	   "with the server back, K9 is allowed by the database, remaining 1");
	rl_client_stats(client, &stats);
	ok(stats.keys == HAMMER_MAX_KEYS && stats.evictions == 1,
	   "the database decided, so the least recently used live key made room for K9");
	d = take(client, "K9", HOURLY, HAMMER_BURST);
	ok(d.source == RL_SOURCE_DATABASE && d.allowed && d.remaining == 0,
	   "K9's next call is allowed by the database, remaining 0");
	d = take(client, "K9", HOURLY, HAMMER_BURST);
	ok(d.source == RL_SOURCE_DATABASE && !d.allowed, "and the one after is denied by it");
	rl_client_free(client);
	return done_testing();
}
