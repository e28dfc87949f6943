/*
 * flood.c
 *		A flood of 10 000 calls on one key far over its limit is refused by
 *		the pre-check: only about twice the burst reach the database.  The
 *		Perl side counts the writes and rl_take calls the server saw.
 *
 * Usage: flood CONNINFO
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;
	RlClientStats stats;
	int			allowed = 0;
	int			refused = 0;
	int			i;

	tap_start(argc, argv, 1, "CONNINFO");
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	/* not the deadline under test: room for a loaded machine's first connection */
	options.deadline_ms = 5000;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	/* one an hour, burst 10: nothing refills during the flood */
	for (i = 0; i < 10000; i++)
	{
		RlDecision	d;

		if (rl_client_take(client, "flood", "mallory", 1.0 / 3600, 10, 1, &d) != RL_OK)
			refused++;
		else if (d.allowed)
			allowed++;
	}
	is_int(refused, 0, "every call is accepted");
	is_int(allowed, 10, "the burst of 10 is allowed, no more");
	rl_client_stats(client, &stats);
	is_int(stats.database, 20, "20 calls (twice the burst) reach the database");
	is_int(stats.local, 9980, "the other 9980 are refused by the pre-check");
	is_int(stats.fallback, 0, "none falls back");

	/* closing ends the sessions, which flushes their statistics */
	rl_client_free(client);
	step("count");
	return done_testing();
}
