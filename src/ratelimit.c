/*
 * ratelimit.c
 *		Module entry point of the ratelimit extension: its settings, and the
 *		cleanup worker when the library is preloaded.
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "ratelimit.h"

PG_MODULE_MAGIC;

char	   *ratelimit_key_secret = NULL;
char	   *ratelimit_key_secret_file = NULL;
int			ratelimit_in_transaction = IN_TRANSACTION_WARN;
int			ratelimit_cleanup_interval = 3600;
int			ratelimit_cleanup_batch_size = 10000;

static const struct config_enum_entry in_transaction_options[] = {
	{"allow", IN_TRANSACTION_ALLOW, false},
	{"warn", IN_TRANSACTION_WARN, false},
	{"error", IN_TRANSACTION_ERROR, false},
	{NULL, 0, false}
};

void		_PG_init(void);

/*
 * GUC_SUPERUSER_ONLY still shows the value to members of
 * pg_read_all_settings, and pg_settings shows its reset value past any show
 * hook, hence GUC_NO_SHOW_ALL too: the secret is for superusers alone.
 */
static const char *
show_key_secret(void)
{
	if (ratelimit_key_secret == NULL || ratelimit_key_secret[0] == '\0')
		return "";
	return superuser() ? ratelimit_key_secret : "(hidden)";
}

void
_PG_init(void)
{
	char	   *configured_file;

	/*
	 * The secret in a file, so that the log and statement statistics see a
	 * path (key_secret.c).  A value set before the library was loaded is
	 * checked now; when it is refused there is no previous one to keep.
	 */
	configured_file = (char *) GetConfigOption("ratelimit.key_secret_file", true, false);
	configured_file = configured_file ? pstrdup(configured_file) : NULL;
	DefineCustomStringVariable("ratelimit.key_secret_file",
							   "File holding the secret for HMAC-SHA-256 bucket keys; takes precedence over ratelimit.key_secret.",
							   "Readable by the server's operating system user only. Changing the secret starts every budget afresh.",
							   &ratelimit_key_secret_file,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   key_secret_file_check, key_secret_file_assign, NULL);
	if (configured_file != NULL)
	{
		if (strcmp(configured_file, ratelimit_key_secret_file) != 0)
			key_secret_file_refused_at_load();
		pfree(configured_file);
	}

	/*
	 * One secret for the whole cluster, so every backend computes the same
	 * keys; hidden from roles that may not see it.  Only a loaded library
	 * can hide it, hence the README's advice to preload.  A reload logs its
	 * new value, hence the file above.
	 */
	DefineCustomStringVariable("ratelimit.key_secret",
							   "Secret for HMAC-SHA-256 bucket keys; empty means plain SHA-256.",
							   "Changing it starts every budget afresh.",
							   &ratelimit_key_secret,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   NULL, key_secret_assign, show_key_secret);

	DefineCustomEnumVariable("ratelimit.in_transaction",
							 "What rl_take does inside an explicit transaction block.",
							 "Its decision rolls back with the transaction and its row lock lasts until commit.",
							 &ratelimit_in_transaction,
							 IN_TRANSACTION_WARN,
							 in_transaction_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	client_ip_define_settings();
	memory_store_define_settings();
	stats_define_settings();

	/*
	 * Defined in every backend that loads the library, so SHOW and ALTER
	 * SYSTEM know them, but used only by the worker.
	 */
	DefineCustomIntVariable("ratelimit.cleanup_interval",
							"Time between two rounds of the cleanup worker over every database.",
							"0 disables the worker. Needs ratelimit in shared_preload_libraries.",
							&ratelimit_cleanup_interval,
							3600,
							0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ratelimit.cleanup_batch_size",
							"Expired buckets the cleanup worker deletes per transaction.",
							NULL,
							&ratelimit_cleanup_batch_size,
							10000,
							1, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("ratelimit");

	if (process_shared_preload_libraries_in_progress)
	{
		memory_store_register();
		stats_register();
		cleanup_worker_register();
	}
}
