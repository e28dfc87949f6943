/*
 * outage.c
 *		The server stops mid-run: every call returns within the deadline,
 *		decided in memory at the same limit (continuing from the database's
 *		last answer), with one warning per limiter per minute and counters
 *		by reason.  When the server is back, decisions return to it after
 *		the backoff.
 *
 * Usage: outage CONNINFO
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define HOURLY (1.0 / 3600)
/*
 * A stopped server refuses at once, so the calls of the outage take far less
 * than any deadline; the one that finds the server back must connect within
 * it, which a loaded machine may not do in a quarter of a second.
 */
#define DEADLINE_MS 1000
#define BACKOFF_MS 300

static RlClient *client;

/* Take one and say how it went; latency in ms. */
static RlDecision
take(const char *limiter, const char *key, int32_t burst, double *latency)
{
	RlDecision	d;
	double		start = now_ms();

	if (rl_client_take(client, limiter, key, HOURLY, burst, 1, &d) != RL_OK)
		d.source = (RlSource) -1;
	if (latency != NULL)
		*latency = now_ms() - start;
	return d;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	RlDecision	d;
	Warnings	warnings = {.lock = PTHREAD_MUTEX_INITIALIZER};
	int			allowed;
	int			calls;
	int			slow;
	int			not_fallback;
	double		latency;
	double		worst;
	double		start;
	int			i;

	tap_start(argc, argv, 1, "CONNINFO");
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.deadline_ms = DEADLINE_MS;
	options.backoff_ms = BACKOFF_MS;
	options.warning = warnings_record;
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	/* the database answers: ada spends 3 of 5, bob 1 of 2 */
	for (i = 0; i < 3; i++)
	{
		d = take("login", "ada", 5, NULL);
		ok(d.allowed && d.remaining == 4 - i && d.source == RL_SOURCE_DATABASE,
		   "before the outage, ada's call %d is allowed by the database, remaining %d",
		   i + 1, 4 - i);
	}
	d = take("reset", "bob", 2, NULL);
	ok(d.allowed && d.remaining == 1 && d.source == RL_SOURCE_DATABASE,
	   "bob's call is allowed by the database, remaining 1");

	step("stop");

	/* memory continues from the database's last answer: 2 left for ada */
	d = take("login", "ada", 5, &latency);
	ok(d.allowed && d.remaining == 1 && d.source == RL_SOURCE_FALLBACK,
	   "after the stop, ada's 4th call is allowed in memory, remaining 1");
	ok(latency < DEADLINE_MS + 100, "within the deadline (%.1f ms)", latency);
	d = take("login", "ada", 5, NULL);
	ok(d.allowed && d.remaining == 0 && d.source == RL_SOURCE_FALLBACK,
	   "ada's 5th call is allowed in memory, remaining 0");
	d = take("login", "ada", 5, NULL);
	ok(!d.allowed && d.source == RL_SOURCE_FALLBACK && fabs(d.retry_after - 3600) < 5,
	   "ada's 6th call is denied in memory: the burst of 5 holds across the outage");
	d = take("reset", "bob", 2, NULL);
	ok(d.allowed && d.remaining == 0 && d.source == RL_SOURCE_FALLBACK,
	   "bob's 2nd call is allowed in memory");
	d = take("reset", "bob", 2, NULL);
	ok(!d.allowed && d.source == RL_SOURCE_FALLBACK, "bob's 3rd call is denied");

	allowed = 0;
	for (i = 0; i < 8; i++)
		allowed += take("login", "eve", 5, NULL).allowed;
	is_int(allowed, 5, "a key first seen during the outage gets its burst of 5 in memory, no more");

	/* three seconds of calls: ten backoff intervals */
	calls = slow = not_fallback = allowed = 0;
	worst = 0;
	start = now_ms();
	while (now_ms() - start < 3000)
	{
		d = take(calls % 2 ? "login" : "reset", calls % 2 ? "ada" : "bob",
				 calls % 2 ? 5 : 2, &latency);
		calls++;
		allowed += d.allowed;
		/* a probe the pre-check refuses (ada sent 10) needs no round trip */
		not_fallback += d.source != RL_SOURCE_FALLBACK && d.source != RL_SOURCE_LOCAL;
		worst = fmax(worst, latency);
		sleep_ms(10);
	}
	ok(worst < DEADLINE_MS + 100, "each of %d calls returns within the deadline (worst %.1f ms)",
	   calls, worst);
	is_int(not_fallback, 0, "all of them are decided in memory (fallback, or the pre-check)");
	is_int(allowed, 0, "and all are denied: the spent keys stay spent");
	is_int(warnings_for(&warnings, "login"), 1, "one warning for the limiter login");
	is_int(warnings_for(&warnings, "reset"), 1, "one warning for the limiter reset");
	ok(strstr(warnings.last, "(error: ") != NULL, "the warning says it was an error: %s",
	   warnings.last);
	rl_client_stats(client, &stats);
	is_int(stats.database, 4, "counters: 4 decisions by the database");
	is_int(stats.fallback + stats.local, 5 + 8 + calls, "%d decisions in memory", 5 + 8 + calls);
	ok(stats.fallback >= (uint64_t) (5 + 8 + calls / 2), "most by the fallback (%llu; %llu by the pre-check)",
	   (unsigned long long) stats.fallback, (unsigned long long) stats.local);
	is_int(stats.fallback_error, stats.fallback, "all fallbacks for an error");
	is_int(stats.fallback_timeout, 0, "none for a timeout");

	step("start");

	/* the next probe, at most one backoff interval away, finds it again */
	start = now_ms();
	do
	{
		d = take("login", "zed", 5, NULL);
		sleep_ms(10);
	} while (d.source != RL_SOURCE_DATABASE && now_ms() - start < 5000);
	latency = now_ms() - start;
	ok(d.source == RL_SOURCE_DATABASE && d.allowed,
	   "after the start, decisions return to the database (after %.0f ms)", latency);
	ok(latency < BACKOFF_MS + DEADLINE_MS + 500,
	   "within a backoff interval of %d ms and a deadline", BACKOFF_MS);
	not_fallback = 0;
	for (i = 0; i < 5; i++)
		not_fallback += take("login", "zed", 5, NULL).source == RL_SOURCE_DATABASE;
	is_int(not_fallback, 5, "and stay there");
	is_int(warnings.count, 2, "no more warnings");

	rl_client_free(client);
	return done_testing();
}
