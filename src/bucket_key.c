/*
 * bucket_key.c
 *		The stored key of a bucket: SHA-256 of limiter || '\0' || key, or
 *		HMAC-SHA-256 under the secret (key_secret.c).  No raw key is ever
 *		stored.  Every function that stores, finds or forgets a bucket, in
 *		backends and in the cleanup worker alike, hashes through bucket_key.
 *
 * A decision hashes one key, so the set-up of a hash must not cost more than
 * the hash: with OpenSSL 3, pg_cryptohash_create fetches the digest by name,
 * allocates a context and registers it with the resource owner on every call.
 * Instead the digest is fetched once per process and one context is reused;
 * for HMAC, two contexts that have absorbed the secret's inner and outer
 * pads (RFC 2104) are kept until the secret changes, so a keyed hash costs
 * two copies of a context and the hashing of the message and of a digest.
 * A build of the server without OpenSSL uses PostgreSQL's own hashes.
 */
#include "postgres.h"

#ifdef USE_OPENSSL
#include <openssl/err.h>
#include <openssl/evp.h>
#else
#include "common/cryptohash.h"
#include "common/hmac.h"
#endif

#include "ratelimit.h"

/* Text cannot contain a NUL byte, so ("ab", "c") and ("a", "bc") differ. */
static const uint8 separator = 0;

static void
digest_failed(const char *what, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not compute %s of the bucket key: %s", what, detail)));
}

#ifdef USE_OPENSSL

/* SHA-256's block size, the length of HMAC's pads */
#define SHA256_BLOCK 64

static EVP_MD *sha256 = NULL;
static EVP_MD_CTX *work = NULL;

/* contexts that have absorbed K ^ ipad and K ^ opad, for secret_generation */
static EVP_MD_CTX *inner_keyed = NULL;
static EVP_MD_CTX *outer_keyed = NULL;
static uint64 keyed_generation = 0;

static void
openssl_failed(const char *what)
{
	unsigned long code = ERR_get_error();

	ERR_clear_error();
	digest_failed(what, code != 0 ? ERR_reason_error_string(code) : "no reason given");
}

static EVP_MD_CTX *
new_context(void)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (ctx == NULL)
		digest_failed("SHA-256", "out of memory");
	return ctx;
}

/* the digest and the work context, once per process */
static void
prepare_digest(void)
{
	if (sha256 == NULL)
	{
		sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
		if (sha256 == NULL)
			openssl_failed("SHA-256");
	}
	if (work == NULL)
		work = new_context();
}

/* inner_keyed and outer_keyed for the secret, when it has changed */
static void
prepare_key_schedule(const uint8 *secret, size_t secret_len)
{
	uint8		block[SHA256_BLOCK] = {0};
	uint8		pad[SHA256_BLOCK];
	int			i;

	if (keyed_generation == key_secret_generation() && inner_keyed != NULL)
		return;
	if (inner_keyed == NULL)
		inner_keyed = new_context();
	if (outer_keyed == NULL)
		outer_keyed = new_context();

	/* a key longer than a block is replaced by its digest */
	if (secret_len > SHA256_BLOCK)
	{
		if (EVP_DigestInit_ex2(work, sha256, NULL) != 1 ||
			EVP_DigestUpdate(work, secret, secret_len) != 1 ||
			EVP_DigestFinal_ex(work, block, NULL) != 1)
			openssl_failed("HMAC-SHA-256");
	}
	else
		memcpy(block, secret, secret_len);

	for (i = 0; i < SHA256_BLOCK; i++)
		pad[i] = block[i] ^ 0x36;
	if (EVP_DigestInit_ex2(inner_keyed, sha256, NULL) != 1 ||
		EVP_DigestUpdate(inner_keyed, pad, SHA256_BLOCK) != 1)
		openssl_failed("HMAC-SHA-256");
	for (i = 0; i < SHA256_BLOCK; i++)
		pad[i] = block[i] ^ 0x5c;
	if (EVP_DigestInit_ex2(outer_keyed, sha256, NULL) != 1 ||
		EVP_DigestUpdate(outer_keyed, pad, SHA256_BLOCK) != 1)
		openssl_failed("HMAC-SHA-256");
	explicit_bzero(block, sizeof(block));
	explicit_bzero(pad, sizeof(pad));
	keyed_generation = key_secret_generation();
}

static void
compute(text *limiter, text *key, const uint8 *secret, size_t secret_len,
		uint8 *digest)
{
	bool		keyed = secret != NULL;

	prepare_digest();
	if (keyed)
		prepare_key_schedule(secret, secret_len);

	if ((keyed ? EVP_MD_CTX_copy_ex(work, inner_keyed) :
		 EVP_DigestInit_ex2(work, sha256, NULL)) != 1 ||
		EVP_DigestUpdate(work, VARDATA_ANY(limiter), VARSIZE_ANY_EXHDR(limiter)) != 1 ||
		EVP_DigestUpdate(work, &separator, 1) != 1 ||
		EVP_DigestUpdate(work, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)) != 1 ||
		EVP_DigestFinal_ex(work, digest, NULL) != 1)
		openssl_failed(keyed ? "HMAC-SHA-256" : "SHA-256");
	if (keyed &&
		(EVP_MD_CTX_copy_ex(work, outer_keyed) != 1 ||
		 EVP_DigestUpdate(work, digest, BUCKET_KEY_LEN) != 1 ||
		 EVP_DigestFinal_ex(work, digest, NULL) != 1))
		openssl_failed("HMAC-SHA-256");
}

#else							/* !USE_OPENSSL */

static void
compute(text *limiter, text *key, const uint8 *secret, size_t secret_len,
		uint8 *digest)
{
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
}

#endif							/* USE_OPENSSL */

bytea *
bucket_key(text *limiter, text *key)
{
	bytea	   *result = palloc(VARHDRSZ + BUCKET_KEY_LEN);
	size_t		secret_len = 0;
	const uint8 *secret = key_secret(&secret_len);

	SET_VARSIZE(result, VARHDRSZ + BUCKET_KEY_LEN);
	compute(limiter, key, secret, secret_len, (uint8 *) VARDATA(result));
	return result;
}
