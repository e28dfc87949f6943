/*
 * refund.c
 *		rl_client_refund gives cells back as rl_refund does, and to the
 *		client's own buckets, so that a refunded request never counts
 *		against the pre-check; during an outage, to the in-memory bucket.
 *		A role without EXECUTE on rl_refund gets the server's 42501, and no
 *		backoff.  rl_client_policy answers the policies as last read,
 *		during an outage too.
 *
 * Usage: refund CONNINFO APP_CONNINFO
 *	APP_CONNINFO connects as a role without EXECUTE on rl_refund.  The
 *	database has the policies pol (one an hour, burst 4, a lockout of 10
 *	minutes growing by 2 up to an hour) and plain (0.5 per second, burst 7,
 *	shadow).  Steps: "stop" stops the server, "start" starts it again.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define HOURLY (1.0 / 3600)
#define BACKOFF_MS 300

static PGconn *raw;

/* What the server holds for (limiter, key) at one an hour, by a peek. */
static int
server_remaining(const char *limiter, const char *key, int burst)
{
	char		rate[32];
	char		burst_text[16];
	const char *values[4] = {limiter, key, rate, burst_text};
	PGresult   *res;
	int			remaining;

	snprintf(rate, sizeof(rate), "%.17g", HOURLY);
	snprintf(burst_text, sizeof(burst_text), "%d", burst);
	res = PQexecParams(raw, "SELECT remaining FROM rl_take($1::text, $2::text, $3::float8, $4::int4, 0)",
					   4, NULL, values, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "peek: %s", PQerrorMessage(raw));
		exit(2);
	}
	remaining = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return remaining;
}

/* The server's SQLSTATE and message for rl_refund with these arguments. */
static void
server_refund_error(const char *limiter, const char *key, const char *cost,
					char *sqlstate, char *message)
{
	const char *values[3] = {limiter, key, cost};
	PGresult   *res = PQexecParams(raw, "SELECT rl_refund($1::text, $2::text, $3::int4)",
								   3, NULL, values, NULL, NULL, 0);

	snprintf(sqlstate, 6, "%s", PQresultStatus(res) == PGRES_FATAL_ERROR ?
			 PQresultErrorField(res, PG_DIAG_SQLSTATE) : "");
	snprintf(message, 256, "%s", PQresultStatus(res) == PGRES_FATAL_ERROR ?
			 PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : "");
	PQclear(res);
}

static bool
taken(RlClient *client, const char *limiter, const char *key, int burst,
	  bool allowed, int remaining, RlSource source)
{
	RlDecision	d;
	bool		same = rl_client_take(client, limiter, key, HOURLY, burst, 1, &d) == RL_OK &&
		d.allowed == allowed && d.remaining == remaining && d.source == source;

	if (!same)
		diag("got %s, remaining %d, source %d", d.allowed ? "allowed" : "denied",
			 d.remaining, (int) d.source);
	return same;
}

static void
test_database(RlClient *client)
{
	RlRefund	refund;
	char		sqlstate[6];
	char		message[256];
	int			i;
	bool		all_database = true;

	for (i = 0; i < 3; i++)
		taken(client, "r", "k", 3, true, 2 - i, RL_SOURCE_DATABASE);
	ok(taken(client, "r", "k", 3, false, 0, RL_SOURCE_DATABASE),
	   "three of a burst of 3 taken, the fourth denied");
	ok(rl_client_refund(client, "r", "k", 1, &refund) == RL_OK && refund.refunded &&
	   refund.source == RL_SOURCE_DATABASE && refund.error.sqlstate[0] == '\0',
	   "a refund of 1: refunded, by the database");
	is_int(server_remaining("r", "k", 3), 1, "the server holds 1 left");
	ok(taken(client, "r", "k", 3, true, 0, RL_SOURCE_DATABASE),
	   "the next take is allowed by the database, 0 left");

	ok(rl_client_refund(client, "r", "fresh", 1, &refund) == RL_OK && !refund.refunded &&
	   refund.source == RL_SOURCE_DATABASE,
	   "a refund of a key without a live bucket changes nothing, as rl_refund says");
	ok(rl_client_refund(client, "r", "k", 0, &refund) == RL_OK && !refund.refunded,
	   "a refund of 0 changes nothing");

	/* take before, refund after: the pre-check (2 x burst) never fills */
	for (i = 0; i < 10; i++)
	{
		RlDecision	d;

		all_database &= rl_client_take(client, "p", "k", HOURLY, 2, 1, &d) == RL_OK &&
			d.allowed && d.source == RL_SOURCE_DATABASE &&
			rl_client_refund(client, "p", "k", 1, &refund) == RL_OK && refund.refunded;
	}
	ok(all_database, "10 takes, each refunded, at burst 2: all allowed by the database, none refused by the pre-check");

	/* bad use: the server's SQLSTATE and message */
	is_int(rl_client_refund(client, "r", "k", -1, &refund), RL_BAD_COST,
		   "a negative cost is refused");
	server_refund_error("r", "k", "-1", sqlstate, message);
	ok(strcmp(refund.error.sqlstate, sqlstate) == 0 &&
	   strcmp(refund.error.message, message) == 0 && !refund.error.from_server,
	   "with the server's SQLSTATE %s and message \"%s\", before any round trip",
	   sqlstate, message);
	ok(rl_client_refund(client, "r", NULL, 1, &refund) == RL_NULL_KEY &&
	   strcmp(refund.error.sqlstate, "22004") == 0,
	   "a NULL key is refused (22004)");
	is_int(rl_client_refund(client, "r", "k", 1, NULL), RL_NULL_ARGUMENT,
		   "a NULL answer is refused");
}

static void
test_not_permitted(const char *conninfo)
{
	RlClientOptions options;
	RlClient   *app;
	RlRefund	refund;
	RlClientStats stats;

	rl_client_options_init(&options);
	options.conninfo = conninfo;
	options.deadline_ms = 5000;
	is_int(rl_client_new(&options, &app), RL_OK, "a client for a role without EXECUTE on rl_refund");
	is_int(rl_client_refund(app, "r", "k", 1, &refund), RL_NOT_PERMITTED,
		   "its refund is RL_NOT_PERMITTED");
	if (!ok(strcmp(refund.error.sqlstate, "42501") == 0 && refund.error.from_server &&
			strcmp(refund.error.message, "permission denied for function rl_refund") == 0,
			"with the server's SQLSTATE 42501 and message"))
		diag("got %s: %s", refund.error.sqlstate, refund.error.message);
	ok(taken(app, "r_app", "k", 3, true, 2, RL_SOURCE_DATABASE),
	   "no backoff: the next take is decided by the database");
	rl_client_stats(app, &stats);
	ok(stats.database == 1 && stats.fallback == 0,
	   "a refund is not a decision: only the take is counted");
	rl_client_free(app);
}

static void
test_policy(RlClient *client)
{
	RlPolicy	policy;
	RlDecision	d;

	is_int(rl_client_policy(client, "pol", &policy), RL_UNKNOWN_LIMITER,
		   "before any policy call, no policy is known");
	ok(rl_client_take_policy(client, "pol", "k", 1, &d) == RL_OK && d.allowed,
	   "a policy call reads rl_policies");
	ok(rl_client_policy(client, "pol", &policy) == RL_OK &&
	   fabs(policy.rate - HOURLY) < 1e-12 && policy.burst == 4 && !policy.shadow &&
	   policy.lockout == 600 && policy.lockout_growth == 2 && policy.lockout_max == 3600,
	   "pol: one an hour, burst 4, enforced, a lockout of 600 s growing by 2 up to 3600 s");
	ok(rl_client_policy(client, "plain", &policy) == RL_OK && policy.rate == 0.5 &&
	   policy.burst == 7 && policy.shadow && policy.lockout == 0 &&
	   policy.lockout_growth == 1 && policy.lockout_max == 0,
	   "plain: 0.5 per second, burst 7, shadow, no lockout");
	ok(rl_client_policy(client, "nobody", &policy) == RL_UNKNOWN_LIMITER &&
	   policy.burst == 0,
	   "a limiter without a policy is RL_UNKNOWN_LIMITER");
	is_int(rl_client_policy(client, NULL, &policy), RL_NULL_LIMITER,
		   "a NULL limiter is refused");
	is_int(rl_client_policy(client, "pol", NULL), RL_NULL_ARGUMENT,
		   "a NULL answer is refused");
}

static void
test_outage(RlClient *client)
{
	RlRefund	refund;
	RlPolicy	policy;
	int			i;

	for (i = 0; i < 3; i++)
		taken(client, "o", "k", 3, true, 2 - i, RL_SOURCE_DATABASE);
	step("stop");
	ok(rl_client_refund(client, "o", "k", 1, &refund) == RL_OK && refund.refunded &&
	   refund.source == RL_SOURCE_FALLBACK,
	   "server stopped: a refund of 1 is made in memory");
	ok(taken(client, "o", "k", 3, true, 0, RL_SOURCE_FALLBACK),
	   "the cell refunded is allowed in memory");
	ok(taken(client, "o", "k", 3, false, 0, RL_SOURCE_FALLBACK),
	   "and no more");
	ok(rl_client_refund(client, "o", "k", 2, &refund) == RL_OK && refund.refunded &&
	   refund.source == RL_SOURCE_FALLBACK,
	   "in the backoff, a refund of 2 is made in memory");
	ok(taken(client, "o", "k", 3, true, 1, RL_SOURCE_FALLBACK) &&
	   taken(client, "o", "k", 3, true, 0, RL_SOURCE_FALLBACK),
	   "both cells are allowed in memory");
	ok(rl_client_refund(client, "o", "never", 1, &refund) == RL_OK && !refund.refunded &&
	   refund.source == RL_SOURCE_FALLBACK,
	   "a key memory does not hold: nothing refunded");
	ok(rl_client_policy(client, "pol", &policy) == RL_OK && policy.burst == 4,
	   "the policies last read are still known");

	step("start");
	PQreset(raw);
	sleep_ms(BACKOFF_MS + 100);
	ok(rl_client_refund(client, "o", "k", 1, &refund) == RL_OK && refund.refunded &&
	   refund.source == RL_SOURCE_DATABASE,
	   "server back, after the backoff: the refund is made by the database");
	is_int(server_remaining("o", "k", 3), 1,
		   "which held the 3 taken before the outage, and now 1 left (memory wrote nothing back)");
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;

	tap_start(argc, argv, 2, "CONNINFO APP_CONNINFO");
	raw = PQconnectdb(argv[1]);
	if (PQstatus(raw) != CONNECTION_OK)
	{
		fprintf(stderr, "%s", PQerrorMessage(raw));
		return 2;
	}
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	/* room for a loaded machine's first connection */
	options.deadline_ms = 5000;
	options.backoff_ms = BACKOFF_MS;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");
	test_database(client);
	test_not_permitted(argv[2]);
	test_policy(client);
	test_outage(client);
	rl_client_free(client);
	PQfinish(raw);
	return done_testing();
}
