/*
 * threads.c
 *		8 threads x 10 000 calls on one client: half with the database up
 *		(through the pool and the pre-check), half after the server stopped
 *		(fallback, backoff probes, warnings, closing dead connections, and
 *		the key bound: evictions of full buckets, refusals for want of
 *		room).  Built with ThreadSanitizer and with AddressSanitizer; the
 *		decisions stay exact per key throughout.
 *
 * Usage: threads CONNINFO LABEL
 *	LABEL prefixes the limiters, so that runs on one server stay apart.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define THREADS 8
#define CALLS 5000				/* per thread and phase */
#define UP_KEYS 48
#define FAST_KEYS 16			/* full again soon: room for as many */
#define DOWN_KEYS 32			/* more than that room */
#define MAX_KEYS (UP_KEYS + FAST_KEYS)
#define BURST 20

static RlClient *client;
static const char *label;

typedef struct Worker
{
	pthread_t	thread;
	int			id;
	bool		down;			/* the second phase */
	int			allowed[UP_KEYS];
	int			bad;			/* an error, or a source the phase rules out */
} Worker;

static void *
work(void *arg)
{
	Worker	   *w = arg;
	int			keys = w->down ? DOWN_KEYS : UP_KEYS;
	int			i;

	for (i = 0; i < CALLS; i++)
	{
		int			k = (i * 7 + w->id) % keys;
		char		limiter[64];
		char		key[16];
		RlDecision	d;

		/* two limiters, for the warnings */
		snprintf(limiter, sizeof(limiter), "%s-%s", label, k % 2 ? "alpha" : "beta");
		snprintf(key, sizeof(key), "%s%d", w->down ? "down" : "up", k);
		if (rl_client_take(client, limiter, key, 1.0 / 3600, BURST, 1, &d) != RL_OK ||
			d.source == (w->down ? RL_SOURCE_DATABASE : RL_SOURCE_FALLBACK))
			w->bad++;
		w->allowed[k] += d.allowed;
	}
	return NULL;
}

/* Run a phase; the number of keys allowed exactly their burst, and in all. */
static int
phase(Worker *workers, bool down, int *bad, int *total)
{
	int			keys = down ? DOWN_KEYS : UP_KEYS;
	int			k;
	int			i;
	int			exact = 0;

	for (i = 0; i < THREADS; i++)
	{
		memset(&workers[i], 0, sizeof(Worker));
		workers[i].id = i;
		workers[i].down = down;
		pthread_create(&workers[i].thread, NULL, work, &workers[i]);
	}
	*bad = *total = 0;
	for (i = 0; i < THREADS; i++)
	{
		pthread_join(workers[i].thread, NULL);
		*bad += workers[i].bad;
	}
	for (k = 0; k < keys; k++)
	{
		int			sum = 0;

		for (i = 0; i < THREADS; i++)
			sum += workers[i].allowed[k];
		*total += sum;
		if (sum == BURST)
			exact++;
		else if (sum != 0)
			diag("key %d: %d allowed", k, sum);
	}
	return exact;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	Worker		workers[THREADS];
	Warnings	warnings = {.lock = PTHREAD_MUTEX_INITIALIZER};
	char		limiter[64];
	char		key[16];
	RlDecision	d;
	int			bad;
	int			total;
	int			i;

	tap_start(argc, argv, 2, "CONNINFO LABEL");
	label = argv[2];
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.max_keys = MAX_KEYS;
	options.backoff_ms = 200;
	/* this test is about races, not speed: no timeout under a sanitizer */
	options.deadline_ms = 10000;
	options.warning = warnings_record;
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	is_int(phase(workers, false, &bad, &total), UP_KEYS,
		   "database up, %d threads x %d calls on %d keys: each key allows exactly its burst of %d",
		   THREADS, CALLS, UP_KEYS, BURST);
	is_int(bad, 0, "every call is decided by the database or the pre-check");
	rl_client_stats(client, &stats);
	ok(stats.database + stats.local == THREADS * CALLS && stats.fallback == 0,
	   "counters: %llu by the database, %llu by the pre-check",
	   (unsigned long long) stats.database, (unsigned long long) stats.local);

	/* fill memory with keys whose buckets are full again 1 ms later */
	bad = 0;
	for (i = 0; i < FAST_KEYS; i++)
	{
		snprintf(limiter, sizeof(limiter), "%s-fast", label);
		snprintf(key, sizeof(key), "fast%d", i);
		rl_client_take(client, limiter, key, 1000, 1, 1, &d);
		bad += !d.allowed || d.source != RL_SOURCE_DATABASE;
	}
	is_int(bad, 0, "%d keys at 1000 per second are allowed by the database", FAST_KEYS);
	rl_client_stats(client, &stats);
	is_int(stats.keys, MAX_KEYS, "memory is full: %d keys", MAX_KEYS);
	sleep_ms(20);

	step("stop");

	is_int(phase(workers, true, &bad, &total), FAST_KEYS,
		   "server down, %d threads x %d calls on %d more keys: %d keys, one per full bucket forgotten, allow exactly their burst of %d",
		   THREADS, CALLS, DOWN_KEYS, FAST_KEYS, BURST);
	is_int(total, FAST_KEYS * BURST,
		   "the other %d keys, without room, are allowed nothing", DOWN_KEYS - FAST_KEYS);
	is_int(bad, 0, "no call is decided by the database");
	rl_client_stats(client, &stats);
	is_int(stats.database + stats.local + stats.fallback, 2 * THREADS * CALLS + FAST_KEYS,
		   "counters: %d decisions in all", 2 * THREADS * CALLS + FAST_KEYS);
	ok(stats.fallback > 0 && stats.fallback == stats.fallback_error,
	   "%llu fallbacks, all for an error", (unsigned long long) stats.fallback);
	ok(stats.keys == MAX_KEYS && stats.evictions == FAST_KEYS && stats.no_room > 0,
	   "memory holds %llu keys, after %llu evictions (the full ones) and %llu refusals for want of room",
	   (unsigned long long) stats.keys, (unsigned long long) stats.evictions,
	   (unsigned long long) stats.no_room);
	snprintf(limiter, sizeof(limiter), "%s-alpha", label);
	is_int(warnings_for(&warnings, limiter), 1, "one warning for the limiter alpha");
	snprintf(limiter, sizeof(limiter), "%s-beta", label);
	is_int(warnings_for(&warnings, limiter), 1, "one warning for the limiter beta");

	rl_client_free(client);
	return done_testing();
}
