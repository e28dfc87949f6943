/* signin.c: may this address try to sign in now? */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include <math.h>
#include <stdio.h>

int
main(int argc, char **argv)
{
	static const char *const sources[] = {"database", "local", "fallback"};
	RlClientOptions options;
	RlClient   *client;
	RlDecision	d;
	RlStatus	status;

	rl_client_options_init(&options);
	/* a libpq connection string; "" uses PGHOST, PGDATABASE, ... */
	options.conninfo = argc > 1 ? argv[1] : "";
	status = rl_client_new(&options, &client);
	if (status != RL_OK)
	{
		fprintf(stderr, "%s\n", rl_status_message(status));
		return 1;
	}

	/* 10 sign-ins per 15 minutes per address, burst 10, this one costs 1 */
	status = rl_client_take(client, "auth_login", "ada@example.com",
							10.0 / 900, 10, 1, &d);
	if (status != RL_OK)
		fprintf(stderr, "%s\n", rl_status_message(status));
	else if (d.allowed)
		printf("allowed, %d left (%s)\n", d.remaining, sources[d.source]);
	else
		printf("denied, retry in %.0f s (%s)\n", ceil(d.retry_after),
			   sources[d.source]);

	rl_client_free(client);
	return status == RL_OK ? 0 : 1;
}
