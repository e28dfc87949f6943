/*
 * policies.c
 *		Decisions by policy and over several limits: the client answers as
 *		the server does (rl_take by policy, both forms of rl_take_all,
 *		including the binding limiter), from the database and in memory,
 *		each multi-limit call one call of rl_take_all_detail and no peek; a
 *		changed policy is used after the refresh interval, and the last one
 *		read during an outage; threads share one client.
 *
 * Usage: policies CONNINFO DEAD_CONNINFO
 *	DEAD_CONNINFO leads nowhere.  Steps: "stop" stops the server.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include "client_test.h"

#define HOURLY "0.0002777777777777778"
#define REFRESH_MS 3000

static PGconn *raw;

static void
sql(const char *command)
{
	PGresult   *res = PQexec(raw, command);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "%s: %s", command, PQerrorMessage(raw));
		exit(2);
	}
	PQclear(res);
}

/* The server's answer to one SQL call returning rl_decision(_all). */
static void
server(const char *query, int nparams, const char *const *values,
	   RlDecisionAll *d, char *limiter)
{
	PGresult   *res = PQexecParams(raw, query, nparams, NULL, values, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "%s: %s", query, PQerrorMessage(raw));
		exit(2);
	}
	d->allowed = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	d->remaining = atoi(PQgetvalue(res, 0, 1));
	d->retry_after = PQgetisnull(res, 0, 2) ? INFINITY : atof(PQgetvalue(res, 0, 2));
	d->reset_after = atof(PQgetvalue(res, 0, 3));
	if (limiter != NULL)
		snprintf(limiter, 64, "%s", PQgetvalue(res, 0, 4));
	PQclear(res);
}

/* Calls of function by every session (track_functions = 'all'). */
static long long
function_calls(const char *function)
{
	const char *values[1] = {function};
	PGresult   *res = PQexecParams(raw,
								   "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
								   "WHERE funcname = $1",
								   1, NULL, values, NULL, NULL, 0);
	long long	calls;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "pg_stat_user_functions: %s", PQerrorMessage(raw));
		exit(2);
	}
	calls = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return calls;
}

static bool
same(const RlDecisionAll *got, const RlDecisionAll *want)
{
	return got->allowed == want->allowed && got->remaining == want->remaining &&
		(isinf(want->retry_after) ? isinf(got->retry_after) :
		 fabs(got->retry_after - want->retry_after) < 5) &&
		fabs(got->reset_after - want->reset_after) < 5;
}

static void
show(const char *who, const RlDecisionAll *d, const char *limiter)
{
	diag("%s: %s, remaining %d, retry_after %g, reset_after %g, limiter %s, source %d",
		 who, d->allowed ? "allowed" : "denied", d->remaining, d->retry_after,
		 d->reset_after, limiter, (int) d->source);
}

/* A field of the server's error, "" when it has none. */
static const char *
error_field(const PGresult *res, int field)
{
	const char *text = PQresultErrorField(res, field);

	return text != NULL ? text : "";
}

/* What the server says to a call it refuses. */
static void
server_error(const char *query, int nparams, const char *const *values,
			 RlError *want)
{
	PGresult   *res = PQexecParams(raw, query, nparams, NULL, values, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_FATAL_ERROR)
	{
		fprintf(stderr, "%s: the server did not refuse it\n", query);
		exit(2);
	}
	want->from_server = true;
	snprintf(want->sqlstate, sizeof(want->sqlstate), "%s",
			 error_field(res, PG_DIAG_SQLSTATE));
	snprintf(want->message, sizeof(want->message), "%s",
			 error_field(res, PG_DIAG_MESSAGE_PRIMARY));
	snprintf(want->detail, sizeof(want->detail), "%s",
			 error_field(res, PG_DIAG_MESSAGE_DETAIL));
	snprintf(want->hint, sizeof(want->hint), "%s",
			 error_field(res, PG_DIAG_MESSAGE_HINT));
	PQclear(res);
}

static bool
same_error(const RlError *got, const RlError *want)
{
	bool		same = got->from_server == want->from_server &&
		strcmp(got->sqlstate, want->sqlstate) == 0 &&
		strcmp(got->message, want->message) == 0 &&
		strcmp(got->detail, want->detail) == 0 &&
		strcmp(got->hint, want->hint) == 0;

	if (!same)
		diag("got %s%s \"%s\" (detail \"%s\", hint \"%s\"), want %s \"%s\" (detail \"%s\", hint \"%s\")",
			 got->sqlstate, got->from_server ? " from the server" : "",
			 got->message, got->detail, got->hint, want->sqlstate,
			 want->message, want->detail, want->hint);
	return same;
}

/* ---- one limit by policy ---- */

static const int32_t single_costs[] = {1, 2, 0, 3, 2, 1, 6, 1};
#define NSINGLE (int) (sizeof(single_costs) / sizeof(single_costs[0]))

/* The server's answers by the policy "login" for key. */
static void
server_single(const char *limiter, const char *key, RlDecisionAll *want)
{
	int			i;

	for (i = 0; i < NSINGLE; i++)
	{
		char		cost[16];
		const char *values[3] = {limiter, key, cost};

		snprintf(cost, sizeof(cost), "%d", single_costs[i]);
		server("SELECT * FROM rl_take($1::text, $2::text, $3::int4)", 3, values,
			   &want[i], NULL);
	}
}

static void
client_single(RlClient *client, const char *where, const char *limiter,
			  const char *key, const RlDecisionAll *want, RlSource source)
{
	int			i;

	for (i = 0; i < NSINGLE; i++)
	{
		RlDecision	d;
		RlDecisionAll got;
		RlStatus	status = rl_client_take_policy(client, limiter, key,
												   single_costs[i], &d);

		got.allowed = d.allowed;
		got.remaining = d.remaining;
		got.retry_after = d.retry_after;
		got.reset_after = d.reset_after;
		got.source = d.source;
		if (!ok(status == RL_OK && same(&got, &want[i]) && d.source == source,
				"%s: %s call %d (cost %d) answers as rl_take(limiter, key, cost)",
				where, limiter, i + 1, single_costs[i]))
		{
			diag("status %d", (int) status);
			show("client", &got, "");
			show("server", &want[i], "");
		}
	}
}

/* ---- several limits ---- */

/* costs of (ip, account): ip has burst 3, account burst 2, one an hour */
static const int32_t all_costs[][2] = {
	{1, 1}, {1, 1}, {1, 1}, {0, 0}, {2, 0}, {4, 0}, {1, 3},
};
#define NALL (int) (sizeof(all_costs) / sizeof(all_costs[0]))

static void
server_all(bool by_policy, const char *ip, const char *account,
		   RlDecisionAll *want, char limiters[][64])
{
	int			i;

	for (i = 0; i < NALL; i++)
	{
		char		keys[256];
		char		costs[32];
		const char *values[5];

		snprintf(keys, sizeof(keys), "{\"%s\",\"%s\"}", ip, account);
		snprintf(costs, sizeof(costs), "{%d,%d}", all_costs[i][0], all_costs[i][1]);
		values[1] = keys;
		if (by_policy)
		{
			values[0] = "{ip_p,account_p}";
			values[2] = costs;
			server("SELECT * FROM rl_take_all($1::text[], $2::text[], $3::int4[])",
				   3, values, &want[i], limiters[i]);
		}
		else
		{
			values[0] = "{ip,account}";
			values[2] = "{" HOURLY "," HOURLY "}";
			values[3] = "{3,2}";
			values[4] = costs;
			server("SELECT * FROM rl_take_all($1::text[], $2::text[], $3::float8[], $4::int4[], $5::int4[])",
				   5, values, &want[i], limiters[i]);
		}
	}
}

static void
client_all(RlClient *client, const char *where, bool by_policy, const char *ip,
		   const char *account, const RlDecisionAll *want, char limiters[][64],
		   RlSource source)
{
	int			i;

	for (i = 0; i < NALL; i++)
	{
		RlRequest	r[2] = {
			{by_policy ? "ip_p" : "ip", ip, 1.0 / 3600, 3, all_costs[i][0]},
			{by_policy ? "account_p" : "account", account, 1.0 / 3600, 2, all_costs[i][1]},
		};
		RlDecisionAll got;
		RlStatus	status = by_policy ?
			rl_client_take_all_policy(client, r, 2, &got) :
			rl_client_take_all(client, r, 2, &got);
		const char *binding = status == RL_OK ? r[got.binding].limiter : "?";

		if (!ok(status == RL_OK && same(&got, &want[i]) && got.source == source &&
				strcmp(binding, limiters[i]) == 0,
				"%s: call %d (costs %d, %d) answers as rl_take_all%s, limiter %s",
				where, i + 1, all_costs[i][0], all_costs[i][1],
				by_policy ? " by policies" : "", limiters[i]))
		{
			diag("status %d", (int) status);
			show("client", &got, binding);
			show("server", &want[i], limiters[i]);
		}
	}
}

/* ---- threads ---- */

#define THREADS 4
#define CALLS 400

static RlClient *shared;
static atomic_int threads_allowed;

static void *
thread_main(void *arg)
{
	char		account[16];
	int			i;

	snprintf(account, sizeof(account), "t%d", (int) (intptr_t) arg);
	for (i = 0; i < CALLS; i++)
	{
		RlRequest	r[2] = {{"th_ip", "shared", 0, 0, 1}, {"th_account", account, 0, 0, 1}};
		RlDecisionAll d;

		if (rl_client_take_all_policy(shared, r, 2, &d) == RL_OK && d.allowed)
			atomic_fetch_add(&threads_allowed, 1);
	}
	return NULL;
}

static void
test_threads(void)
{
	pthread_t	threads[THREADS];
	int			i;

	for (i = 0; i < THREADS; i++)
		pthread_create(&threads[i], NULL, thread_main, (void *) (intptr_t) i);
	for (i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	is_int(atomic_load(&threads_allowed), 100,
		   "%d threads x %d calls over a shared burst of 100: exactly 100 allowed",
		   THREADS, CALLS);
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client;
	RlClient   *dead;
	RlClientStats stats;
	RlDecision	d;
	RlDecisionAll all;
	RlDecisionAll want_single[NSINGLE];
	RlDecisionAll want_all[NALL];
	RlDecisionAll want_all_policy[NALL];
	char		limiters[NALL][64];
	char		limiters_policy[NALL][64];
	int			allowed;
	int			i;

	tap_start(argc, argv, 2, "CONNINFO DEAD_CONNINFO");
	raw = PQconnectdb(argv[1]);
	if (PQstatus(raw) != CONNECTION_OK)
	{
		fprintf(stderr, "%s", PQerrorMessage(raw));
		return 2;
	}
	sql("INSERT INTO rl_policies VALUES "
		"('login', " HOURLY ", 5, false), ('ip_p', " HOURLY ", 3, false), "
		"('account_p', " HOURLY ", 2, false), ('change', " HOURLY ", 2, false), "
		"('shadowed', " HOURLY ", 1, true), ('th_ip', " HOURLY ", 100, false), "
		"('th_account', " HOURLY ", 1000, false)");

	rl_client_options_init(&options);
	ok(options.policy_refresh_ms == 10000, "policies are read again every 10 s by default");
	options.conninfo = argv[1];
	options.policy_refresh_ms = REFRESH_MS;
	/* the threads' decisions stay exact only without timeouts */
	options.deadline_ms = 10000;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	/*
	 * Several limits, first, while no session has called rl_take: the same
	 * answers as the server's, binding limiter too.
	 */
	server_all(false, "1.1.1.1", "ada", want_all, limiters);
	client_all(client, "database", false, "2.2.2.2", "bob", want_all, limiters,
			   RL_SOURCE_DATABASE);
	server_all(true, "1.1.1.1", "ada", want_all_policy, limiters_policy);
	client_all(client, "database", true, "2.2.2.2", "bob", want_all_policy,
			   limiters_policy, RL_SOURCE_DATABASE);

	/*
	 * Each call asked rl_take_all_detail alone, with no peek (rl_take) of its
	 * buckets.  The client's session reports its calls about a second after
	 * it goes idle.
	 */
	{
		double		until = now_ms() + 30000;

		while (function_calls("rl_take_all_detail") < 2 * NALL && now_ms() < until)
			sleep_ms(100);
		is_int(function_calls("rl_take_all_detail"), 2 * NALL,
			   "each of the %d multi-limit calls is one call of rl_take_all_detail",
			   2 * NALL);
		is_int(function_calls("rl_take"), 0, "and no call of rl_take: no peek");
	}

	/* by policy: the same answers as the server's, on another key */
	server_single("login", "server", want_single);
	client_single(client, "database", "login", "client", want_single,
				  RL_SOURCE_DATABASE);
	for (i = 0; i < 3; i++)
		ok(rl_client_take_policy(client, "shadowed", "k", 1, &d) == RL_OK &&
		   d.allowed && d.retry_after == 0 && d.remaining == 0,
		   "a shadow policy never denies: call %d allowed, remaining 0", i + 1);
	is_int(rl_client_take_policy(client, "nobody", "k", 1, &d), RL_UNKNOWN_LIMITER,
		   "a limiter without a policy is RL_UNKNOWN_LIMITER");
	ok(!d.allowed && strcmp(rl_status_message(RL_UNKNOWN_LIMITER),
							"limiter has no policy in rl_policies") == 0,
	   "with a denial left behind and a message");
	{
		const char *values[3] = {"nobody", "k", "1"};
		RlError		want = {0};

		server_error("SELECT * FROM rl_take($1::text, $2::text, $3::int4)", 3,
					 values, &want);
		ok(same_error(&d.error, &want) && strcmp(want.sqlstate, "42704") == 0,
		   "and the server's SQLSTATE 42704, message and hint in its error");
	}
	ok(rl_client_take_policy(client, "login", "error-cleared", 1, &d) == RL_OK &&
	   d.error.sqlstate[0] == '\0' && d.error.message[0] == '\0' &&
	   !d.error.from_server,
	   "a decision after it has an empty error");
	is_int(rl_client_take_policy(client, "", "k", 1, &d), RL_EMPTY_LIMITER,
		   "an empty limiter is refused as rl_take refuses it");
	ok(strcmp(d.error.sqlstate, "22023") == 0 && !d.error.from_server &&
	   strcmp(d.error.message, "limiter must not be empty") == 0,
	   "its error: the server's SQLSTATE 22023 and the client's sentence, not from the server");
	is_int(rl_client_take_policy(client, "login", "k", -1, &d), RL_BAD_COST,
		   "a negative cost is refused");

	/* several limits: bad use */
	{
		RlRequest	twice[2] = {{"ip", "x", 1, 1, 1}, {"ip", "x", 1, 1, 1}};
		RlRequest	bad[2] = {{"ip", "x", 1, 1, 1}, {"account", "y", 1, 0, 1}};
		RlRequest	unknown[2] = {{"ip_p", "x", 0, 0, 1}, {"nobody", "y", 0, 0, 1}};

		is_int(rl_client_take_all(client, twice, 2, &all), RL_DUPLICATE,
			   "the same pair twice is refused");
		is_int(rl_client_take_all(client, twice, 0, &all), RL_BAD_COUNT,
			   "no request is refused");
		is_int(rl_client_take_all(client, twice, 17, &all), RL_BAD_COUNT,
			   "17 requests are refused");
		ok(rl_client_take_all(client, bad, 2, &all) == RL_BAD_BURST && all.binding == 1,
		   "a bad burst is refused, naming the request at fault");
		ok(rl_client_take_all_policy(client, unknown, 2, &all) == RL_UNKNOWN_LIMITER &&
		   all.binding == 1 && !all.allowed,
		   "a limiter without a policy is RL_UNKNOWN_LIMITER, naming the request");
	}

	/*
	 * Errors a retry cannot fix are bad use: an error status for the request
	 * at fault, no fallback decision and no backoff.
	 */
	{
		RlRequest	explicit[2] = {{"ip", "x", 1, 1, 1}, {"login", "y", 1000000, 1, 1}};
		const char *take_values[5] = {"login", "k", "1000000", "1", "1"};
		const char *all_values[5] = {"{ip,login}", "{x,y}", "{1,1000000}", "{1,1}", "{1,1}"};
		const char *slow_values[3] = {"slow", "k", "1"};
		char		long_limiter[1 + 150 * 2 + 1] = "x";
		const char *long_values[5] = {long_limiter, "k", "1", "1", "1"};
		RlError		want = {0};
		RlClientStats before;
		RlClientStats after;

		sql("INSERT INTO rl_policies VALUES ('slow', 1e-6, 2147483647, false)");
		rl_client_stats(client, &before);
		ok(rl_client_take(client, "login", "k", 1000000, 1, 1, &d) == RL_NOT_PERMITTED &&
		   !d.allowed,
		   "the explicit form of a limiter with a policy is RL_NOT_PERMITTED (42501)");
		server_error("SELECT * FROM rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)",
					 5, take_values, &want);
		ok(same_error(&d.error, &want) && strcmp(want.sqlstate, "42501") == 0 &&
		   want.hint[0] != '\0',
		   "with the server's SQLSTATE 42501, message, detail and hint");
		ok(rl_client_take_all(client, explicit, 2, &all) == RL_NOT_PERMITTED &&
		   all.binding == 1 && !all.allowed,
		   "in rl_take_all too, naming the request at fault");
		server_error("SELECT * FROM rl_take_all_detail($1::text[], $2::text[], $3::float8[], $4::int4[], $5::int4[])",
					 5, all_values, &want);
		ok(same_error(&all.error, &want) && strstr(all.error.message, "\"login\"") != NULL,
		   "with the server's error, naming the limiter");
		ok(rl_client_take_policy(client, "slow", "k", 1, &d) == RL_REFUSED && !d.allowed,
		   "a policy the database refuses to use (22023) is RL_REFUSED");
		server_error("SELECT * FROM rl_take($1::text, $2::text, $3::int4)", 3,
					 slow_values, &want);
		ok(same_error(&d.error, &want) && strncmp(want.sqlstate, "22", 2) == 0,
		   "with the server's SQLSTATE %s and message", want.sqlstate);

		/* "limiter \"x" and 150 two-byte characters: cut in one of them */
		for (i = 0; i < 150; i++)
			memcpy(long_limiter + 1 + 2 * i, "\xc3\xa9", 2);
		{
			char		insert[512];

			snprintf(insert, sizeof(insert),
					 "INSERT INTO rl_policies VALUES ('%s', 1, 1, false)", long_limiter);
			sql(insert);
		}
		ok(rl_client_take(client, long_limiter, "k", 1, 1, 1, &d) == RL_NOT_PERMITTED,
		   "a limiter of 301 bytes with a policy is RL_NOT_PERMITTED");
		server_error("SELECT * FROM rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)",
					 5, long_values, &want);
		if (!ok(strlen(d.error.message) == 254 &&
				strncmp(d.error.message, want.message, 254) == 0 &&
				strncmp(d.error.message, "limiter \"x\xc3\xa9", 11) == 0,
				"its message is the server's cut at 254 bytes, before the character that does not fit in 255"))
			diag("got %zu bytes: %s", strlen(d.error.message), d.error.message);
		rl_client_stats(client, &after);
		ok(after.fallback == before.fallback && after.database == before.database &&
		   after.local == before.local,
		   "none of them is a decision: no fallback, nothing counted");
		ok(rl_client_take_policy(client, "login", "bad-use", 1, &d) == RL_OK &&
		   d.source == RL_SOURCE_DATABASE,
		   "and no backoff: the next call is decided by the database");
	}

	/* the pre-check runs by the policy read: 2 x burst 2 requests sent */
	sleep_ms(REFRESH_MS);		/* the first call reads, the others do not */
	for (i = 0; i < 5; i++)
		rl_client_take_policy(client, "change", "k", 1, &d);
	ok(rl_client_take_policy(client, "change", "k", 1, &d) == RL_OK && !d.allowed &&
	   d.source == RL_SOURCE_LOCAL,
	   "the pre-check refuses by the policy's burst of 2 (4 requests counted; the call that read the policies was not pre-checked)");
	sql("UPDATE rl_policies SET burst = 10 WHERE limiter = 'change'");
	ok(rl_client_take_policy(client, "change", "k", 1, &d) == RL_OK && !d.allowed &&
	   d.source == RL_SOURCE_LOCAL,
	   "before the refresh interval, the policy read is still used");
	sleep_ms(REFRESH_MS + 500);
	ok(rl_client_take_policy(client, "change", "k", 1, &d) == RL_OK && d.allowed &&
	   d.source == RL_SOURCE_DATABASE && d.remaining == 7,
	   "after it, the new burst of 10 applies: allowed by the database, remaining 7");
	rl_client_stats(client, &stats);
	ok(stats.policy_reads >= 2, "rl_policies was read again (%llu reads)",
	   (unsigned long long) stats.policy_reads);

	/* threads on one client, the database up */
	shared = client;
	test_threads();

	/* explicit limits in memory: the same answers, without a database */
	rl_client_options_init(&options);
	options.conninfo = argv[2];
	is_int(rl_client_new(&options, &dead), RL_OK, "a client without a database");
	client_all(dead, "fallback", false, "3.3.3.3", "cid", want_all, limiters,
			   RL_SOURCE_FALLBACK);
	ok(rl_client_take_policy(dead, "login", "k", 1, &d) == RL_OK && !d.allowed &&
	   d.source == RL_SOURCE_FALLBACK,
	   "a policy never read is refused in memory, never allowed");
	rl_client_stats(dead, &stats);
	is_int(stats.no_policy, 1, "and counted as no_policy");
	rl_client_free(dead);

	/* made after the client's last round trip, so never read by it */
	sql("INSERT INTO rl_policies VALUES ('late', " HOURLY ", 5, false)");
	step("stop");

	/* the outage: the last policies read decide */
	client_single(client, "outage", "login", "outage", want_single,
				  RL_SOURCE_FALLBACK);
	client_all(client, "outage", true, "4.4.4.4", "dan", want_all_policy,
			   limiters_policy, RL_SOURCE_FALLBACK);
	allowed = 0;
	for (i = 0; i < 12; i++)
		allowed += rl_client_take_policy(client, "change", "fresh", 1, &d) == RL_OK &&
			d.allowed;
	is_int(allowed, 10, "a new key gets the changed policy's burst of 10 in memory");
	ok(rl_client_take_policy(client, "shadowed", "k", 1, &d) == RL_OK && d.allowed &&
	   d.source == RL_SOURCE_FALLBACK, "a shadow policy does not deny in memory");
	ok(rl_client_take_policy(client, "late", "k", 1, &d) == RL_OK && !d.allowed &&
	   d.source == RL_SOURCE_FALLBACK,
	   "a policy made after the last read is refused in memory");

	/* memory continues from each bucket's last database answer */
	{
		RlRequest	r[2] = {{"ip_p", "2.2.2.2", 0, 0, 1}, {"account_p", "bob", 0, 0, 0}};

		ok(rl_client_take_all_policy(client, r, 2, &all) == RL_OK && all.allowed &&
		   all.remaining == 0 && all.source == RL_SOURCE_FALLBACK,
		   "the database left the ip 1 of 3: allowed in memory, remaining 0");
		if (!ok(rl_client_take_all_policy(client, r, 2, &all) == RL_OK && !all.allowed &&
				all.binding == 0 && fabs(all.retry_after - 3600) < 60,
				"then denied, bound by the ip"))
			show("client", &all, r[all.binding].limiter);
	}

	rl_client_free(client);
	PQfinish(raw);
	return done_testing();
}
