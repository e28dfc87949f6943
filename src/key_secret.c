/*
 * key_secret.c
 *		The HMAC key of stored bucket keys: the content of
 *		ratelimit.key_secret_file when it is set, or else ratelimit.key_secret.
 *
 * PostgreSQL logs the new value of every setting a reload changes, and
 * pg_stat_statements keeps the text of ALTER SYSTEM: with the file, both see
 * a path, never the secret.  The file is read when the setting is checked
 * (at load and at every reload, in every process), so a file replaced in
 * place takes effect at the next reload too.
 *
 * A file that cannot be used is refused: at a reload the previous value
 * stays in effect, and the server log says why.  When the library loads
 * there is no previous value to keep, and deciding without the configured
 * secret would store keys under another one: every call that hashes a key
 * then fails until a reload accepts a file.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "utils/guc.h"

#include "pg_compat.h"
#include "ratelimit.h"

/* a secret longer than this is more likely the wrong file */
#define MAX_SECRET_FILE_SIZE 4096

/* the guc "extra" of ratelimit.key_secret_file: the secret it holds */
typedef struct FileSecret
{
	size_t		len;
	uint8		data[FLEXIBLE_ARRAY_MEMBER];
} FileSecret;

static const FileSecret *file_secret = NULL;
static bool file_refused_at_load = false;

/*
 * Counts the changes of either setting, so that bucket_key.c knows when the
 * key schedule it keeps is stale without comparing secrets on every call.
 */
static uint64 generation = 1;

/*
 * Read the secret from path into buf (MAX_SECRET_FILE_SIZE + 1 bytes); answers
 * its length, or -1 with the reason in GUC_check_errdetail.
 */
static ssize_t
read_secret_file(const char *path, uint8 *buf)
{
	struct stat st;
	ssize_t		len = 0;
	ssize_t		n;
	int			fd = open(path, O_RDONLY | PG_BINARY, 0);

	if (fd < 0)
	{
		GUC_check_errdetail("Could not open file \"%s\": %m.", path);
		return -1;
	}
	if (fstat(fd, &st) < 0)
	{
		GUC_check_errdetail("Could not stat file \"%s\": %m.", path);
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode))
	{
		GUC_check_errdetail("\"%s\" is not a regular file.", path);
		close(fd);
		return -1;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO))
	{
		GUC_check_errdetail("File \"%s\" is accessible to other users than the server's (mode %04o).",
							path, (unsigned int) (st.st_mode & 0777));
		GUC_check_errhint("Make it readable by the server's operating system user only, for example with chmod 600.");
		close(fd);
		return -1;
	}
	/* one byte more than the largest secret tells a file that is too long */
	while ((n = read(fd, buf + len, MAX_SECRET_FILE_SIZE + 1 - len)) > 0)
	{
		len += n;
		if (len > MAX_SECRET_FILE_SIZE)
			break;
	}
	if (n < 0)
		GUC_check_errdetail("Could not read file \"%s\": %m.", path);
	close(fd);
	if (n < 0)
		return -1;
	if (len > MAX_SECRET_FILE_SIZE)
	{
		GUC_check_errdetail("File \"%s\" is longer than %d bytes.", path,
							MAX_SECRET_FILE_SIZE);
		return -1;
	}

	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len == 0)
	{
		GUC_check_errdetail("File \"%s\" holds no secret.", path);
		return -1;
	}
	return len;
}

bool
key_secret_file_check(char **newval, void **extra, GucSource source)
{
	uint8		buf[MAX_SECRET_FILE_SIZE + 1];
	ssize_t		len;
	FileSecret *secret;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	len = read_secret_file(*newval, buf);
	if (len < 0)
	{
		explicit_bzero(buf, sizeof(buf));
		return false;
	}
	secret = rl_guc_extra_malloc(offsetof(FileSecret, data) + len);
	if (secret == NULL)
	{
		explicit_bzero(buf, sizeof(buf));
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		GUC_check_errmsg("out of memory");
		return false;
	}
	secret->len = len;
	memcpy(secret->data, buf, len);
	explicit_bzero(buf, sizeof(buf));
	*extra = secret;
	return true;
}

void
key_secret_file_assign(const char *newval, void *extra)
{
	file_secret = extra;
	file_refused_at_load = false;
	generation++;
}

void
key_secret_assign(const char *newval, void *extra)
{
	generation++;
}

/* changes with every new value of either setting */
uint64
key_secret_generation(void)
{
	return generation;
}

/* ratelimit.key_secret_file was set, but refused when the library loaded */
void
key_secret_file_refused_at_load(void)
{
	file_refused_at_load = true;
	generation++;
}

/*
 * The HMAC key and its length, the file's taking precedence; NULL when there
 * is none (plain SHA-256).
 */
const uint8 *
key_secret(size_t *len)
{
	if (file_refused_at_load)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the file of ratelimit.key_secret_file could not be used"),
				 errdetail("No key is hashed under another secret than the one configured; the server log says why the file was refused."),
				 errhint("Fix the file, then reload the configuration.")));
	if (file_secret != NULL)
	{
		*len = file_secret->len;
		return file_secret->data;
	}
	if (ratelimit_key_secret != NULL && ratelimit_key_secret[0] != '\0')
	{
		*len = strlen(ratelimit_key_secret);
		return (const uint8 *) ratelimit_key_secret;
	}
	return NULL;
}
