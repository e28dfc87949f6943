/*
 * bucket_key.c
 *		The stored key of a bucket: SHA-256 of limiter || '\0' || key, or
 *		HMAC-SHA-256 under the secret (key_secret.c).  No raw key is ever
 *		stored.
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/hmac.h"

#include "ratelimit.h"

static void
digest_failed(const char *what, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not compute %s of the bucket key: %s", what, detail)));
}

/*
 * Text cannot contain a NUL byte, so the separator makes the pair
 * unambiguous: ("ab", "c") and ("a", "bc") hash differently.
 */
bytea *
bucket_key(text *limiter, text *key)
{
	static const uint8 separator = 0;
	bytea	   *result = palloc(VARHDRSZ + BUCKET_KEY_LEN);
	uint8	   *digest = (uint8 *) VARDATA(result);
	size_t		secret_len;
	const uint8 *secret = key_secret(&secret_len);

	SET_VARSIZE(result, VARHDRSZ + BUCKET_KEY_LEN);

	if (secret != NULL)
	{
		pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);

		if (ctx == NULL)
			digest_failed("HMAC-SHA-256", "out of memory");
		if (pg_hmac_init(ctx, secret, secret_len) < 0 ||
			pg_hmac_update(ctx, (const uint8 *) VARDATA_ANY(limiter),
						   VARSIZE_ANY_EXHDR(limiter)) < 0 ||
			pg_hmac_update(ctx, &separator, 1) < 0 ||
			pg_hmac_update(ctx, (const uint8 *) VARDATA_ANY(key),
						   VARSIZE_ANY_EXHDR(key)) < 0 ||
			pg_hmac_final(ctx, digest, BUCKET_KEY_LEN) < 0)
			digest_failed("HMAC-SHA-256", pg_hmac_error(ctx));
		pg_hmac_free(ctx);
	}
	else
	{
		pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

		if (pg_cryptohash_init(ctx) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) VARDATA_ANY(limiter),
								 VARSIZE_ANY_EXHDR(limiter)) < 0 ||
			pg_cryptohash_update(ctx, &separator, 1) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) VARDATA_ANY(key),
								 VARSIZE_ANY_EXHDR(key)) < 0 ||
			pg_cryptohash_final(ctx, digest, BUCKET_KEY_LEN) < 0)
			digest_failed("SHA-256", pg_cryptohash_error(ctx));
		pg_cryptohash_free(ctx);
	}
	return result;
}
