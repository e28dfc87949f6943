/*
 * pgbouncer.c
 *		Through PgBouncer in transaction pooling mode: four threads on four
 *		client connections share two server connections, and every decision
 *		still comes from the database, exactly (unnamed statements only:
 *		nothing outlives a transaction).
 *
 * Usage: pgbouncer CONNINFO
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define THREADS 4

static RlClient *client;

typedef struct Worker
{
	pthread_t	thread;
	int			id;
	int			own_allowed;	/* of 50 calls on its own key, burst 30 */
	int			shared_allowed; /* of 20 calls on a shared key, burst 50 */
	int			errors;
} Worker;

static void *
work(void *arg)
{
	Worker	   *w = arg;
	char		key[16];
	RlDecision	d;
	int			i;

	snprintf(key, sizeof(key), "t%d", w->id);
	for (i = 0; i < 50; i++)
	{
		if (rl_client_take(client, "bouncer", key, 1.0 / 3600, 30, 1, &d) != RL_OK ||
			d.source != RL_SOURCE_DATABASE)
			w->errors++;
		w->own_allowed += d.allowed;
	}
	for (i = 0; i < 20; i++)
	{
		if (rl_client_take(client, "bouncer", "shared", 1.0 / 3600, 50, 1, &d) != RL_OK ||
			d.source != RL_SOURCE_DATABASE)
			w->errors++;
		w->shared_allowed += d.allowed;
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	Worker		workers[THREADS];
	int			shared = 0;
	int			i;

	tap_start(argc, argv, 1, "CONNINFO");
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.pool_size = THREADS;
	/* PgBouncer queues the four behind its two server connections */
	options.deadline_ms = 5000;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	memset(workers, 0, sizeof(workers));
	for (i = 0; i < THREADS; i++)
	{
		workers[i].id = i;
		pthread_create(&workers[i].thread, NULL, work, &workers[i]);
	}
	for (i = 0; i < THREADS; i++)
	{
		pthread_join(workers[i].thread, NULL);
		is_int(workers[i].errors, 0, "thread %d: all 70 decisions come from the database", i);
		is_int(workers[i].own_allowed, 30, "thread %d: its own key allows its burst of 30 of 50", i);
		shared += workers[i].shared_allowed;
	}
	is_int(shared, 50, "the shared key allows its burst of 50 of 80, across the threads");
	rl_client_stats(client, &stats);
	ok(stats.database == THREADS * 70 && stats.fallback == 0 && stats.local == 0,
	   "counters: %d decisions by the database, none elsewhere", THREADS * 70);

	/* the client's connections are still open: PgBouncer multiplexes them */
	step("count_backends");

	rl_client_free(client);
	return done_testing();
}
