-- Stored keys of the SQL edition: SHA-256 of limiter, a zero byte and key,
-- as the C extension stores them; with a key_secret row in rl_settings,
-- HMAC-SHA-256 under it (pgcrypto), and budgets start afresh.  Run by the
-- edition's owner.
BEGIN;
SELECT plan(5);

SELECT rl_take('login', 'ada@example.com', 1.0 / 60, 3);
SELECT is((SELECT key FROM rl_buckets),
		  sha256(convert_to('login', 'UTF8') || '\x00'::bytea || convert_to('ada@example.com', 'UTF8')),
		  'the stored key is sha256(limiter || 0x00 || key)');
SELECT is((SELECT count(*) FROM rl_buckets WHERE key = sha256('login:ada@example.com'::bytea)), 0::bigint,
		  'never the plain pair');

INSERT INTO rl_settings VALUES ('key_secret', 'correct horse battery staple');
SELECT is((rl_take('login', 'ada@example.com', 1.0 / 60, 3)).remaining, 2, 'a new secret starts afresh');
SELECT is((SELECT count(*) FROM rl_buckets
		   WHERE key = hmac(convert_to('login', 'UTF8') || '\x00'::bytea || convert_to('ada@example.com', 'UTF8'),
							convert_to('correct horse battery staple', 'UTF8'), 'sha256')),
		  1::bigint, 'under a secret the key is HMAC-SHA-256');
SELECT throws_ok($$INSERT INTO rl_settings VALUES ('key_secret_typo', 'x')$$, '23514', NULL,
				 'rl_settings names only what it holds');

SELECT * FROM finish();
ROLLBACK;
