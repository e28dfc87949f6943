/*
 * warnings.c
 *		2 000 limiters fall back at once, more than the 1 024 the client
 *		remembers: no limiter warns more than once per interval, and the
 *		others share one summary line per interval, so 6 000 fallbacks give
 *		1 025 warnings, not one each.  After the interval, the limiters warn
 *		again.
 *
 * Usage: warnings CONNINFO
 *	a server that is not running.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define LIMITERS 2000
#define REMEMBERED 1024
#define INTERVAL_MS 5000

static struct
{
	int			named[LIMITERS];	/* warnings naming each limiter */
	double		last_ms[LIMITERS];
	int			too_soon;		/* a limiter named twice within half an interval */
	int			summaries;
	int			unknown;
	char		summary[1024];
} seen;

/* Called by one thread only: this program takes from one. */
static void
record(void *arg, const char *limiter, const char *message)
{
	int			i;

	(void) arg;
	if (limiter[0] == '\0')
	{
		seen.summaries++;
		snprintf(seen.summary, sizeof(seen.summary), "%s", message);
		return;
	}
	if (sscanf(limiter, "l%d", &i) != 1 || i < 0 || i >= LIMITERS)
	{
		seen.unknown++;
		return;
	}
	if (seen.named[i]++ > 0 && now_ms() - seen.last_ms[i] < INTERVAL_MS / 2)
		seen.too_soon++;
	seen.last_ms[i] = now_ms();
}

static int
named_total(void)
{
	int			n = 0;
	int			i;

	for (i = 0; i < LIMITERS; i++)
		n += seen.named[i];
	return n;
}

/* One call for each limiter; how many were not decided in memory. */
static int
round_of_calls(RlClient *client)
{
	int			not_fallback = 0;
	int			i;

	for (i = 0; i < LIMITERS; i++)
	{
		char		limiter[16];
		RlDecision	d;

		snprintf(limiter, sizeof(limiter), "l%d", i);
		not_fallback += rl_client_take(client, limiter, "k", 1, 10, 1, &d) != RL_OK ||
			d.source != RL_SOURCE_FALLBACK;
	}
	return not_fallback;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;
	int			not_fallback = 0;
	int			most = 0;
	int			limiters = 0;
	int			i;

	tap_start(argc, argv, 1, "CONNINFO");
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	options.warning_interval_ms = INTERVAL_MS;
	options.warning = record;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	for (i = 0; i < 3; i++)
		not_fallback += round_of_calls(client);
	is_int(not_fallback, 0, "3 rounds of calls on %d limiters are all decided in memory",
		   LIMITERS);
	for (i = 0; i < LIMITERS; i++)
	{
		most = seen.named[i] > most ? seen.named[i] : most;
		limiters += seen.named[i] > 0;
	}
	is_int(most, 1, "no limiter is named in more than one warning");
	is_int(limiters, REMEMBERED, "%d limiters are named, as many as are remembered",
		   REMEMBERED);
	is_int(seen.summaries, 1, "the others share one summary line");
	ok(strstr(seen.summary, "more than 1024 limiters") != NULL &&
	   strstr(seen.summary, "at most once per 5000 ms") != NULL,
	   "which says so: %s", seen.summary);
	is_int(named_total() + seen.summaries + seen.unknown, REMEMBERED + 1,
		   "%d fallbacks give %d warnings", 3 * LIMITERS, REMEMBERED + 1);

	/* a new interval: the remembered limiters make room for others */
	sleep_ms(INTERVAL_MS + 500);
	not_fallback = round_of_calls(client);
	is_int(not_fallback, 0, "after the interval, a round is decided in memory");
	is_int(named_total(), 2 * REMEMBERED, "%d limiters are named again", REMEMBERED);
	is_int(seen.summaries, 2, "with one more summary line");
	is_int(seen.too_soon, 0, "no limiter is named twice within an interval");
	is_int(seen.unknown, 0, "every warning names a limiter that was called, or none");

	rl_client_free(client);
	return done_testing();
}
