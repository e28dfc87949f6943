/*
 * decisions.c
 *		The client decides as the server does: a sequence of calls through
 *		the database, the pre-check and the in-memory fallback gives the
 *		figures written below by hand from the contract; bad use is refused
 *		with the server's own message, before any round trip.
 *
 * Usage: decisions CONNINFO DEAD_CONNINFO SCHEMA_CONNINFO
 *	DEAD_CONNINFO leads nowhere (fallback); SCHEMA_CONNINFO is a database
 *	whose extension lives in the schema 'rl "q"'.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

static PGconn *raw;

/* What the server says to rl_take with these arguments (NULL: SQL NULL). */
static void
server_take(const char *limiter, const char *key, const char *rate,
			const char *burst, const char *cost, char *sqlstate,
			char *message, RlDecision *d)
{
	const char *values[5] = {limiter, key, rate, burst, cost};
	PGresult   *res = PQexecParams(raw,
								   "SELECT * FROM rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)",
								   5, NULL, values, NULL, NULL, 0);

	sqlstate[0] = message[0] = '\0';
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
	{
		d->allowed = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		d->remaining = atoi(PQgetvalue(res, 0, 1));
		d->retry_after = PQgetisnull(res, 0, 2) ? INFINITY : atof(PQgetvalue(res, 0, 2));
		d->reset_after = atof(PQgetvalue(res, 0, 3));
	}
	else
	{
		snprintf(sqlstate, 6, "%s", PQresultErrorField(res, PG_DIAG_SQLSTATE));
		snprintf(message, 512, "%s", PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
	}
	PQclear(res);
}

typedef struct BadUse
{
	const char *what;
	const char *limiter;
	const char *key;
	double		rate;
	const char *rate_text;		/* as the server gets it */
	int32_t		burst;
	int32_t		cost;
	RlStatus	status;
	const char *sqlstate;
	const char *message;		/* NULL: the server's differs (encoding) */
} BadUse;

static const char rate_message[] = "rate must be a finite number of requests per second above 0 and at most 1000000";
static const char tolerance_message[] = "burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range";

static const BadUse bad_uses[] = {
	{"NULL limiter", NULL, "k", 1, "1", 1, 1, RL_NULL_LIMITER, "22004", "limiter must not be null"},
	{"empty limiter", "", "k", 1, "1", 1, 1, RL_EMPTY_LIMITER, "22023", "limiter must not be empty"},
	{"NULL key", "l", NULL, 1, "1", 1, 1, RL_NULL_KEY, "22004", "key must not be null"},
	{"empty key", "l", "", 1, "1", 1, 1, RL_EMPTY_KEY, "22023", "key must not be empty"},
	{"empty limiter before a bad rate", "", "k", 0, "0", 1, 1, RL_EMPTY_LIMITER, "22023", "limiter must not be empty"},
	{"rate 0", "l", "k", 0, "0", 1, 1, RL_BAD_RATE, "22023", rate_message},
	{"rate -1", "l", "k", -1, "-1", 1, 1, RL_BAD_RATE, "22023", rate_message},
	{"rate NaN", "l", "k", NAN, "NaN", 1, 1, RL_BAD_RATE, "22023", rate_message},
	{"rate infinite", "l", "k", INFINITY, "Infinity", 1, 1, RL_BAD_RATE, "22023", rate_message},
	{"rate above 1000000", "l", "k", 1000000.5, "1000000.5", 1, 1, RL_BAD_RATE, "22023", rate_message},
	{"burst 0", "l", "k", 1, "1", 0, 1, RL_BAD_BURST, "22023", "burst must be at least 1"},
	{"burst -5", "l", "k", 1, "1", -5, 1, RL_BAD_BURST, "22023", "burst must be at least 1"},
	{"bad burst before a bad cost", "l", "k", 1, "1", 0, -1, RL_BAD_BURST, "22023", "burst must be at least 1"},
	{"cost -1", "l", "k", 1, "1", 1, -1, RL_BAD_COST, "22023", "cost must not be negative"},
	{"a tolerance that overflows", "l", "k", 1e-9, "1e-9", INT32_MAX, 1, RL_TOLERANCE_TOO_LARGE, "22023", tolerance_message},
	{"a tolerance past the end of timestamptz", "l", "k", 1e-6, "1e-6", 5000000, 1, RL_TOLERANCE_TOO_LARGE, "22023", tolerance_message},
	{"a key that is not UTF-8", "l", "\xff", 1, "1", 1, 1, RL_INVALID_KEY, "22021", NULL},
	{"an overlong UTF-8 limiter", "\xc0\xaf", "k", 1, "1", 1, 1, RL_INVALID_LIMITER, "22021", NULL},
	{"a UTF-16 surrogate in the key", "l", "\xed\xa0\x80", 1, "1", 1, 1, RL_INVALID_KEY, "22021", NULL},
	{"a code point above U+10FFFF", "l", "\xf4\x90\x80\x80", 1, "1", 1, 1, RL_INVALID_KEY, "22021", NULL},
	{"a truncated UTF-8 sequence", "l", "ab\xe2\x82", 1, "1", 1, 1, RL_INVALID_KEY, "22021", NULL},
};

static void
test_bad_use(RlClient *client)
{
	RlClientStats stats;
	RlDecision	d;
	RlDecision	server;
	char		sqlstate[6];
	char		message[512];
	size_t		i;

	for (i = 0; i < sizeof(bad_uses) / sizeof(bad_uses[0]); i++)
	{
		const BadUse *b = &bad_uses[i];
		char		burst[16];
		char		cost[16];
		RlStatus	status;

		d.allowed = true;
		status = rl_client_take(client, b->limiter, b->key, b->rate, b->burst,
								b->cost, &d);
		is_int(status, b->status, "%s: the client refuses it", b->what);
		ok(!d.allowed, "%s: the decision left behind is a denial", b->what);
		if (!ok(strcmp(d.error.sqlstate, b->sqlstate) == 0 && !d.error.from_server &&
				strcmp(d.error.message, rl_status_message(status)) == 0,
				"%s: its error holds %s and the client's sentence", b->what,
				b->sqlstate))
			diag("error: %s %s", d.error.sqlstate, d.error.message);
		snprintf(burst, sizeof(burst), "%d", b->burst);
		snprintf(cost, sizeof(cost), "%d", b->cost);
		server_take(b->limiter, b->key, b->rate_text, burst, cost, sqlstate,
					message, &server);
		if (!ok(strcmp(sqlstate, b->sqlstate) == 0, "%s: the server refuses it with %s",
				b->what, b->sqlstate))
			diag("server: %s %s", sqlstate, message);
		if (b->message != NULL)
		{
			if (!ok(strcmp(rl_status_message(status), b->message) == 0 &&
					strcmp(message, b->message) == 0,
					"%s: client and server say \"%s\"", b->what, b->message))
				diag("client: %s; server: %s", rl_status_message(status), message);
		}
	}

	/* the edges that both accept */
	ok(rl_client_take(client, "edge", "rate", 1000000, 1, 1, &d) == RL_OK &&
	   d.allowed && d.source == RL_SOURCE_DATABASE &&
	   d.error.sqlstate[0] == '\0' && d.error.message[0] == '\0',
	   "rate 1000000 and burst 1 are accepted, by the database, with an empty error");
	ok(rl_client_take(client, "edge", "\xf0\x9f\x98\x80 \xc3\xa9", 1e-6, 1000, 0, &d) == RL_OK &&
	   d.allowed && d.remaining == 1000 && d.source == RL_SOURCE_DATABASE,
	   "a 4-byte UTF-8 key, a tolerance of 31 years and cost 0 are accepted");

	is_int(rl_client_take(NULL, "l", "k", 1, 1, 1, &d), RL_NULL_ARGUMENT,
		   "a NULL client is refused");
	ok(d.error.sqlstate[0] == '\0' &&
	   strcmp(d.error.message, rl_status_message(RL_NULL_ARGUMENT)) == 0,
	   "its error has no SQLSTATE (no call of the server is like it) and the sentence");
	is_int(rl_client_take(client, "l", "k", 1, 1, 1, NULL), RL_NULL_ARGUMENT,
		   "a NULL decision is refused");
	ok(strcmp(rl_status_message(RL_NULL_ARGUMENT),
			  "client, options and decision must not be null") == 0,
	   "with a message naming them");
	rl_client_stats(client, &stats);
	is_int(stats.database + stats.local + stats.fallback, 2,
		   "refused calls make no decision: only the two accepted ones count");
	is_int(stats.keys, 2, "and keep no key in memory");
}

static void
test_options(const char *conninfo)
{
	RlClientOptions options;
	RlClient   *client = (RlClient *) &options;

	rl_client_options_init(&options);
	ok(options.deadline_ms == 250 && options.backoff_ms == 1000 &&
	   options.pool_size == 4 && options.max_keys == 100000 &&
	   options.warning_interval_ms == 60000 && options.schema == NULL &&
	   options.warning == NULL && strcmp(options.conninfo, "") == 0,
	   "the defaults: deadline 250 ms, backoff 1 s, 4 connections, 100000 keys, a warning a minute");
	options.conninfo = conninfo;
	options.deadline_ms = 0;
	is_int(rl_client_new(&options, &client), RL_BAD_OPTION, "deadline_ms 0 is refused");
	ok(client == NULL, "and no client is made");
	rl_client_options_init(&options);
	options.max_keys = 0;
	is_int(rl_client_new(&options, &client), RL_BAD_OPTION, "max_keys 0 is refused");
	rl_client_options_init(&options);
	options.schema = "";
	is_int(rl_client_new(&options, &client), RL_BAD_OPTION, "an empty schema is refused");
	ok(strstr(rl_status_message(RL_BAD_OPTION), "deadline_ms") != NULL,
	   "the message names the options");
	is_int(rl_client_new(NULL, &client), RL_NULL_ARGUMENT, "NULL options are refused");
	rl_client_free(NULL);
}

/*
 * One hour per request (T = 3600 s), burst 5 (tau = 18000 s): nothing refills
 * while the test runs, so remaining is exact and the times are within the
 * test's own duration of the figures below.
 */
typedef struct Step
{
	int32_t		cost;
	bool		allowed;
	int32_t		remaining;
	double		retry_after;
	double		reset_after;
	RlSource	source;			/* through the database, with the pre-check */
} Step;

static const Step sequence[] = {
	{1, true, 4, 0, 3600, RL_SOURCE_DATABASE},
	{2, true, 2, 0, 10800, RL_SOURCE_DATABASE},
	{0, true, 2, 0, 10800, RL_SOURCE_DATABASE}, /* a peek */
	{3, false, 2, 3600, 10800, RL_SOURCE_DATABASE},	/* 6 T > tau */
	{2, true, 0, 0, 18000, RL_SOURCE_DATABASE},
	{1, false, 0, 3600, 18000, RL_SOURCE_DATABASE},
	{6, false, 0, INFINITY, 18000, RL_SOURCE_DATABASE},	/* cost > burst */
	{1, false, 0, 3600, 18000, RL_SOURCE_DATABASE},	/* 10 cells sent */
	{1, false, 0, 3600, 18000, RL_SOURCE_LOCAL},	/* 11 > 2 x burst */
	{2, false, 0, 7200, 18000, RL_SOURCE_LOCAL},
	{0, true, 0, 0, 18000, RL_SOURCE_DATABASE}, /* a peek passes */
};

static const char *const source_names[] = {"database", "local", "fallback"};

static void
check_step(const char *where, int i, const RlDecision *d, const Step *s,
		   RlSource source)
{
	ok(d->allowed == s->allowed && d->remaining == s->remaining &&
	   d->source == source &&
	   (isinf(s->retry_after) ? isinf(d->retry_after) :
		fabs(d->retry_after - s->retry_after) < 5) &&
	   fabs(d->reset_after - s->reset_after) < 5,
	   "%s, call %d (cost %d): %s, remaining %d, retry_after %g, reset_after %g, from %s",
	   where, i + 1, s->cost, s->allowed ? "allowed" : "denied", s->remaining,
	   s->retry_after, s->reset_after, source_names[source]);
	if (d->allowed != s->allowed || d->remaining != s->remaining || d->source != source)
		diag("got %s, remaining %d, retry_after %g, reset_after %g, from %s",
			 d->allowed ? "allowed" : "denied", d->remaining, d->retry_after,
			 d->reset_after, source_names[d->source]);
}

static void
test_sequence(RlClient *client, const char *where, const char *key,
			  bool fallback)
{
	int			n = sizeof(sequence) / sizeof(sequence[0]);
	int			i;

	for (i = 0; i < n; i++)
	{
		RlDecision	d;

		is_int(rl_client_take(client, "seq", key, 1.0 / 3600, 5, sequence[i].cost, &d),
			   RL_OK, "%s, call %d is accepted", where, i + 1);
		check_step(where, i, &d, &sequence[i],
				   fallback ? RL_SOURCE_FALLBACK : sequence[i].source);
	}
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;
	RlClient   *dead;
	RlClient   *schema;
	RlClientStats stats;
	RlDecision	d;
	RlDecision	server;
	char		sqlstate[6];
	char		message[512];
	Warnings	warnings = {.lock = PTHREAD_MUTEX_INITIALIZER};

	tap_start(argc, argv, 3, "CONNINFO DEAD_CONNINFO SCHEMA_CONNINFO");
	{
		const char *const keywords[] = {"dbname", "client_encoding", NULL};
		const char *const values[] = {argv[1], "UTF8", NULL};

		raw = PQconnectdbParams(keywords, values, 1);
	}
	if (PQstatus(raw) != CONNECTION_OK)
	{
		fprintf(stderr, "%s", PQerrorMessage(raw));
		return 2;
	}

	/* SipHash-2-4's published vector: key 00..0f, message 00..0e */
	{
		const uint64_t key[2] = {UINT64_C(0x0706050403020100), UINT64_C(0x0f0e0d0c0b0a0908)};
		unsigned char msg[15];
		const void *parts[1] = {msg};
		size_t		lengths[1] = {15};
		int			i;

		for (i = 0; i < 15; i++)
			msg[i] = (unsigned char) i;
		ok(rl_siphash(key, parts, lengths, 1) == UINT64_C(0xa129ca6149be45e5),
		   "the key hash is SipHash-2-4");
	}

	test_options(argv[1]);

	rl_client_options_init(&options);
	options.conninfo = argv[1];
	/* not the deadline under test: room for a loaded machine's first connection */
	options.deadline_ms = 5000;
	options.warning = warnings_record;
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");
	test_bad_use(client);

	/* through the database, and the pre-check once 10 cells were sent */
	test_sequence(client, "database", "ada", false);
	server_take("seq", "ada", "0.0002777777777777778", "5", "1", sqlstate,
				message, &server);
	ok(!server.allowed && server.remaining == 0 &&
	   fabs(server.retry_after - 3600) < 5 && fabs(server.reset_after - 18000) < 5,
	   "the server agrees with the local refusals: denied, remaining 0, retry_after 3600, reset_after 18000");
	rl_client_stats(client, &stats);
	ok(stats.database == 2 + 9 && stats.local == 2 && stats.fallback == 0,
	   "counters: 11 decisions by the database, 2 local, no fallback");
	is_int(warnings.count, 0, "no warning while the database answers");

	/* the same sequence decided in memory gives the same figures */
	rl_client_options_init(&options);
	options.conninfo = argv[2];
	options.warning = warnings_record;
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &dead), RL_OK,
		   "a client is made while its database is unreachable");
	test_sequence(dead, "fallback", "ada", true);
	rl_client_stats(dead, &stats);
	ok(stats.fallback == 11 && stats.fallback_error == 11 && stats.fallback_timeout == 0,
	   "counters: 11 fallbacks, all for an error");
	is_int(warnings_for(&warnings, "seq"), 1, "one warning for the limiter");
	ok(strstr(warnings.last, "limiter \"seq\" is decided in memory") != NULL &&
	   strstr(warnings.last, "error") != NULL,
	   "it names the limiter and the error");
	rl_client_free(dead);

	/* a schema given as an option, quoted as an identifier */
	rl_client_options_init(&options);
	options.conninfo = argv[3];
	options.deadline_ms = 5000;
	options.schema = "rl \"q\"";
	is_int(rl_client_new(&options, &schema), RL_OK, "a client for the schema rl \"q\"");
	ok(rl_client_take(schema, "s", "k", 1, 2, 1, &d) == RL_OK && d.allowed &&
	   d.remaining == 1 && d.source == RL_SOURCE_DATABASE,
	   "rl_take is found in that schema");
	rl_client_free(schema);

	rl_client_free(client);
	PQfinish(raw);
	return done_testing();
}
