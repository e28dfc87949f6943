/*
 * stall.c
 *		The server stalls: another session holds the bucket's row lock, so
 *		rl_take waits.  Each call returns within the deadline plus a small
 *		margin, decided in memory with the reason timeout; the query is
 *		cancelled, so no waiting backend piles up; the database is probed at
 *		most once per backoff interval; after the lock is released,
 *		decisions return to the database.
 *
 * Usage: stall CLIENT_CONNINFO ADMIN_CONNINFO
 *	ADMIN_CONNINFO connects straight to the server as a superuser (only the
 *	owner may lock rows of rl_buckets).
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define DEADLINE_MS 400
#define BACKOFF_MS 500
/*
 * What a loaded machine adds to a call.  Below one more deadline, it still
 * tells one deadline from two (a second attempt) or from the lock's wait,
 * which lasts until the COMMIT after the last call.
 */
#define MARGIN_MS 350

static RlClient *client;

static void
exec_ok(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
		exit(2);
	}
	PQclear(res);
}

/* Backends waiting for a lock, after at most 5 s for them to go away. */
static long
lock_waiters(PGconn *observer)
{
	long		n = -1;
	int			tries;

	for (tries = 0; tries < 50; tries++)
	{
		PGresult   *res = PQexec(observer,
								 "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'");

		n = PQresultStatus(res) == PGRES_TUPLES_OK ? atol(PQgetvalue(res, 0, 0)) : -1;
		PQclear(res);
		if (n == 0)
			break;
		sleep_ms(100);
	}
	return n;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	RlDecision	d;
	Warnings	warnings = {.lock = PTHREAD_MUTEX_INITIALIZER};
	PGconn	   *holder;
	PGconn	   *observer;
	double		latency;
	double		worst;
	double		start;
	int			calls;
	int			probes;
	double		shortest_probe;
	int			not_fallback;

	tap_start(argc, argv, 2, "CLIENT_CONNINFO ADMIN_CONNINFO");
	holder = PQconnectdb(argv[2]);
	observer = PQconnectdb(argv[2]);
	if (PQstatus(holder) != CONNECTION_OK || PQstatus(observer) != CONNECTION_OK)
	{
		fprintf(stderr, "%s", PQerrorMessage(holder));
		return 2;
	}
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.deadline_ms = DEADLINE_MS;
	options.backoff_ms = BACKOFF_MS;
	options.warning = warnings_record;
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	d = timed_take(client, "stall", "k", 1.0 / 3600, 1000, &latency);
	ok(d.allowed && d.source == RL_SOURCE_DATABASE, "the first call is decided by the database");

	/* stall: an allowed decision needs the row lock, which is held */
	exec_ok(holder, "BEGIN");
	exec_ok(holder, "SELECT * FROM rl_buckets FOR UPDATE");

	d = timed_take(client, "stall", "k", 1.0 / 3600, 1000, &latency);
	ok(d.source == RL_SOURCE_FALLBACK && d.allowed && d.remaining == 998,
	   "a call on the locked row is decided in memory, continuing from the database: remaining 998");
	ok(latency >= DEADLINE_MS - 5 && latency < DEADLINE_MS + MARGIN_MS,
	   "after waiting out the deadline of %d ms, not much longer (%.1f ms)",
	   DEADLINE_MS, latency);
	is_int(lock_waiters(observer), 0, "its query was cancelled: no backend waits for the lock");

	/*
	 * 3 s of calls: the database is probed once per backoff interval,
	 * which starts again when a probe fails, so probes start a deadline
	 * and a backoff interval apart at least.  A probe is the call that
	 * moves the end of the backoff (the one attempt of its interval),
	 * whatever the time a slow machine adds to a call in memory; each
	 * probe waits out the deadline.
	 */
	calls = probes = not_fallback = 0;
	worst = 0;
	shortest_probe = INFINITY;
	start = now_ms();
	while (now_ms() - start < 3000)
	{
		int64_t		backoff_end = client->health[0].retry_db_at_us;

		d = timed_take(client, "stall", "k", 1.0 / 3600, 1000, &latency);
		calls++;
		if (client->health[0].retry_db_at_us != backoff_end)
		{
			probes++;
			shortest_probe = fmin(shortest_probe, latency);
		}
		not_fallback += d.source != RL_SOURCE_FALLBACK;
		worst = fmax(worst, latency);
		sleep_ms(10);
	}
	ok(worst < DEADLINE_MS + MARGIN_MS,
	   "each of %d calls returns within the deadline plus %d ms (worst %.1f ms)",
	   calls, MARGIN_MS, worst);
	is_int(not_fallback, 0, "all are decided in memory");
	ok(probes >= 2 && probes <= 3000 / (BACKOFF_MS + DEADLINE_MS) + 1,
	   "the database is tried again once per backoff interval of %d ms after each failure, no more: %d probes in 3 s",
	   BACKOFF_MS, probes);
	ok(shortest_probe >= DEADLINE_MS - 5,
	   "each probe waited for the database until the deadline (the shortest %.1f ms)",
	   shortest_probe);
	is_int(lock_waiters(observer), 0, "every probe was cancelled: no waiting backend piles up");
	rl_client_stats(client, &stats);
	is_int(stats.fallback, calls + 1, "counters: %d fallbacks", calls + 1);
	is_int(stats.fallback_timeout, calls + 1, "all of them for a timeout");
	is_int(stats.fallback_error, 0, "none for an error");
	is_int(warnings_for(&warnings, "stall"), 1, "one warning for the limiter");
	ok(strstr(warnings.last, "(timeout: no answer within 400 ms)") != NULL,
	   "it says the database timed out: %s", warnings.last);

	exec_ok(holder, "COMMIT");

	start = now_ms();
	do
	{
		d = timed_take(client, "stall", "k", 1.0 / 3600, 1000, &latency);
		sleep_ms(10);
	} while (d.source != RL_SOURCE_DATABASE && now_ms() - start < 5000);
	latency = now_ms() - start;
	ok(d.source == RL_SOURCE_DATABASE && d.allowed,
	   "once the lock is released, decisions return to the database (after %.0f ms)", latency);
	ok(latency < BACKOFF_MS + DEADLINE_MS + 500, "within a backoff interval and a deadline");

	rl_client_free(client);
	PQfinish(holder);
	PQfinish(observer);
	return done_testing();
}
