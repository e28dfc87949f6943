/*
 * cplusplus.cpp
 *		A C++ program includes the client header and calls the client, whose
 *		implementation is built as C: the declarations have C linkage, so
 *		the program links, and every call answers as it does from C.
 *
 * Usage: cplusplus CONNINFO
 *	The database has the policy cxx_policy: one an hour, burst 3.
 */
#include "ratelimit_client.h"

#include <string>
#include <vector>

#include "client_test.h"

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClient   *client = nullptr;
	RlDecision	d;
	RlDecisionAll all;
	RlRefund	refund;
	RlPolicy	policy;
	RlClientStats stats;
	std::vector<std::string> warnings;
	const RlRequest requests[2] = {{"cxx", "k2", 1.0 / 3600, 2, 1},
	{"cxx_other", "k2", 1.0 / 3600, 2, 1}};

	tap_start(argc, argv, 1, "CONNINFO");
	rl_client_options_init(&options);
	options.conninfo = argv[1];
	/* room for a loaded machine's first connection */
	options.deadline_ms = 5000;
	options.warning = [](void *arg, const char *, const char *message) {
		static_cast<std::vector<std::string> *>(arg)->push_back(message);
	};
	options.warning_arg = &warnings;
	is_int(rl_client_new(&options, &client), RL_OK, "a C++ program makes a client");

	ok(rl_client_take(client, "cxx", "k", 1.0 / 3600, 2, 1, &d) == RL_OK &&
	   d.allowed && d.remaining == 1 && d.source == RL_SOURCE_DATABASE,
	   "rl_client_take: allowed by the database, 1 left");
	ok(rl_client_take_policy(client, "cxx_policy", "k", 1, &d) == RL_OK &&
	   d.allowed && d.remaining == 2 && d.source == RL_SOURCE_DATABASE,
	   "rl_client_take_policy: allowed by the database, 2 left of the policy's 3");
	ok(rl_client_policy(client, "cxx_policy", &policy) == RL_OK &&
	   policy.burst == 3 && !policy.shadow && policy.lockout == 0,
	   "rl_client_policy: the policy read, burst 3");
	ok(rl_client_take_all(client, requests, 2, &all) == RL_OK && all.allowed &&
	   all.remaining == 1 && all.source == RL_SOURCE_DATABASE,
	   "rl_client_take_all: allowed, 1 left in each bucket");
	ok(rl_client_refund(client, "cxx", "k", 1, &refund) == RL_OK &&
	   refund.refunded && refund.source == RL_SOURCE_DATABASE,
	   "rl_client_refund: refunded by the database");

	is_int(rl_client_take_policy(client, "nobody", "k", 1, &d), RL_UNKNOWN_LIMITER,
		   "a limiter without a policy is refused");
	if (!ok(std::string(d.error.sqlstate) == "42704" && d.error.from_server &&
			std::string(d.error.message) == "limiter \"nobody\" has no policy",
			"with the server's SQLSTATE and message"))
		diag("got %s: %s", d.error.sqlstate, d.error.message);
	is_int(rl_client_take(client, "cxx", "k", 1.0 / 3600, 0, 1, &d), RL_BAD_BURST,
		   "a bad burst is refused before any round trip");
	ok(std::string(rl_status_message(RL_BAD_BURST)) == d.error.message &&
	   std::string(d.error.sqlstate) == "22023" && !d.error.from_server,
	   "with the server's SQLSTATE and the client's sentence");

	rl_client_stats(client, &stats);
	ok(stats.database == 3 && stats.local == 0 && stats.fallback == 0,
	   "counters: 3 decisions by the database");
	rl_client_free(client);
	ok(warnings.empty(), "no warning");
	return done_testing();
}
