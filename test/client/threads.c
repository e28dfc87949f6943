/*
 * threads.c
 *		8 threads x 10 000 calls on one client: half with the database up
 *		(through the pool, the pre-check and the key bound), half after the
 *		server stopped (fallback, backoff probes, warnings, closing dead
 *		connections).  Built with ThreadSanitizer and with AddressSanitizer;
 *		the decisions stay exact per key throughout.
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
#define DOWN_KEYS 32			/* with UP_KEYS, more than max_keys */
#define MAX_KEYS 64
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

/* Run a phase; true when every key allowed exactly its burst. */
static bool
phase(Worker *workers, bool down, int *bad)
{
	int			keys = down ? DOWN_KEYS : UP_KEYS;
	int			k;
	int			i;
	bool		exact = true;

	for (i = 0; i < THREADS; i++)
	{
		memset(&workers[i], 0, sizeof(Worker));
		workers[i].id = i;
		workers[i].down = down;
		pthread_create(&workers[i].thread, NULL, work, &workers[i]);
	}
	*bad = 0;
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
		if (sum != BURST)
		{
			diag("key %d: %d allowed", k, sum);
			exact = false;
		}
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
	int			bad;

	tap_start();
	if (argc != 3)
	{
		fprintf(stderr, "usage: %s CONNINFO LABEL\n", argv[0]);
		return 2;
	}
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

	ok(phase(workers, false, &bad),
	   "database up, %d threads x %d calls on %d keys: each key allows exactly its burst of %d",
	   THREADS, CALLS, UP_KEYS, BURST);
	is_int(bad, 0, "every call is decided by the database or the pre-check");
	rl_client_stats(client, &stats);
	ok(stats.database + stats.local == THREADS * CALLS && stats.fallback == 0,
	   "counters: %llu by the database, %llu by the pre-check",
	   (unsigned long long) stats.database, (unsigned long long) stats.local);

	step("stop");

	ok(phase(workers, true, &bad),
	   "server down, %d threads x %d calls on %d more keys: each key allows exactly its burst of %d",
	   THREADS, CALLS, DOWN_KEYS, BURST);
	is_int(bad, 0, "no call is decided by the database");
	rl_client_stats(client, &stats);
	is_int(stats.database + stats.local + stats.fallback, 2 * THREADS * CALLS,
		   "counters: %d decisions in all", 2 * THREADS * CALLS);
	ok(stats.fallback > 0 && stats.fallback == stats.fallback_error,
	   "%llu fallbacks, all for an error", (unsigned long long) stats.fallback);
	ok(stats.keys <= MAX_KEYS && stats.evictions > 0,
	   "memory holds %llu keys, at most %d, after %llu evictions",
	   (unsigned long long) stats.keys, MAX_KEYS, (unsigned long long) stats.evictions);
	snprintf(limiter, sizeof(limiter), "%s-alpha", label);
	is_int(warnings_for(&warnings, limiter), 1, "one warning for the limiter alpha");
	snprintf(limiter, sizeof(limiter), "%s-beta", label);
	is_int(warnings_for(&warnings, limiter), 1, "one warning for the limiter beta");

	rl_client_free(client);
	return done_testing();
}
