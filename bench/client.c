/*
 * client.c
 *		Decisions per second through the C client: the database path at 1
 *		and 8 threads, the pre-check path (one key far over its limit) and
 *		the fallback path (no database), each for a few seconds.
 *
 * The deadline is 5 s instead of 250 ms: on a loaded machine a decision
 * that times out would be decided in memory and counted in the wrong row.
 *
 * Usage: client CONNINFO [SECONDS]	(bench/client_run builds and runs it)
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include <stdio.h>

typedef struct Run
{
	RlClient   *client;
	const char *key_prefix;		/* NULL: one key for all */
	double		rate;
	int32_t		burst;
	double		seconds;
	pthread_t	thread;
	int			id;
	long		decisions;
	long		failures;
} Run;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* the outage is on purpose here */
static void
quiet(void *arg, const char *limiter, const char *message)
{
	(void) arg;
	(void) limiter;
	(void) message;
}

static void *
work(void *arg)
{
	Run		   *r = arg;
	double		end = now_s() + r->seconds;
	char		key[64] = "mallory";
	long		i;

	for (i = 0; (i & 63) != 0 || now_s() < end; i++)
	{
		RlDecision	d;

		/* many keys: no two threads wait for one row */
		if (r->key_prefix != NULL)
			snprintf(key, sizeof(key), "%s-%d-%ld", r->key_prefix, r->id, i % 1000);
		if (rl_client_take(r->client, "bench", key, r->rate, r->burst, 1, &d) != RL_OK)
			r->failures++;
		r->decisions++;
	}
	return NULL;
}

/* Decisions per second of threads calling one client for seconds. */
static void
measure(const char *what, const char *conninfo, int threads,
		const char *key_prefix, double rate, int32_t burst, double seconds,
		RlSource expected)
{
	RlClientOptions options;
	RlClient   *client;
	RlClientStats stats;
	Run			runs[8];
	long		total = 0;
	long		failures = 0;
	double		start;
	int			i;

	rl_client_options_init(&options);
	options.conninfo = conninfo;
	options.pool_size = threads;
	options.warning = quiet;
	/* a stall of a busy machine must not switch paths mid-measurement */
	options.deadline_ms = 5000;
	if (rl_client_new(&options, &client) != RL_OK)
	{
		fprintf(stderr, "no client\n");
		exit(1);
	}
	start = now_s();
	for (i = 0; i < threads; i++)
	{
		memset(&runs[i], 0, sizeof(Run));
		runs[i].client = client;
		runs[i].key_prefix = key_prefix;
		runs[i].rate = rate;
		runs[i].burst = burst;
		runs[i].seconds = seconds;
		runs[i].id = i;
		pthread_create(&runs[i].thread, NULL, work, &runs[i]);
	}
	for (i = 0; i < threads; i++)
	{
		pthread_join(runs[i].thread, NULL);
		total += runs[i].decisions;
		failures += runs[i].failures;
	}
	rl_client_stats(client, &stats);
	printf("%-22s %d thread%s %10.0f decisions/s  (database %llu, local %llu, fallback %llu%s)\n",
		   what, threads, threads == 1 ? ": " : "s:", total / (now_s() - start),
		   (unsigned long long) stats.database, (unsigned long long) stats.local,
		   (unsigned long long) stats.fallback, failures ? ", FAILURES" : "");
	/* a figure from the wrong path would mislead */
	if (failures != 0 ||
		(expected == RL_SOURCE_DATABASE && stats.database < (uint64_t) total * 99 / 100) ||
		(expected == RL_SOURCE_LOCAL && stats.local < (uint64_t) total * 99 / 100) ||
		(expected == RL_SOURCE_FALLBACK && stats.fallback < (uint64_t) total * 99 / 100))
	{
		fprintf(stderr, "%s: not measured on the intended path\n", what);
		exit(1);
	}
	rl_client_free(client);
}

int
main(int argc, char **argv)
{
	double		seconds = argc > 2 ? atof(argv[2]) : 3;

	if (argc < 2)
	{
		fprintf(stderr, "usage: %s CONNINFO [SECONDS]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* a limit no key reaches: every call is an allowed, written decision */
	measure("database", argv[1], 1, "db1", 1000000, 1000000, seconds, RL_SOURCE_DATABASE);
	measure("database", argv[1], 8, "db8", 1000000, 1000000, seconds, RL_SOURCE_DATABASE);
	/* one key far over its limit: refused by the pre-check */
	measure("pre-check", argv[1], 1, NULL, 1.0 / 3600, 1, seconds, RL_SOURCE_LOCAL);
	measure("pre-check", argv[1], 8, NULL, 1.0 / 3600, 1, seconds, RL_SOURCE_LOCAL);
	/* no database behind the connection string: decided in memory */
	measure("fallback", "host=/nonexistent port=1", 1, "fb1", 1000000, 1000000, seconds, RL_SOURCE_FALLBACK);
	measure("fallback", "host=/nonexistent port=1", 8, "fb8", 1000000, 1000000, seconds, RL_SOURCE_FALLBACK);
	return 0;
}
