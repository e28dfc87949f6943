-- The settings of the SQL edition, rows of rl_settings.  Stored keys:
-- SHA-256 of limiter, a zero byte and key, as the C extension stores them;
-- with a key_secret row, HMAC-SHA-256 under it (pgcrypto), and budgets start
-- afresh.  A trusted_proxies row: what the two-argument rl_client_ip
-- trusts, refused when written if invalid or trust-all.  Run by the
-- edition's owner.
BEGIN;
SELECT plan(11);

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
SELECT throws_ok($$INSERT INTO rl_settings VALUES ('trusted_proxies', '10.0.0.0/8, 0.0.0.0/0')$$, '22023',
				 'trusted must not contain 0.0.0.0/0', 'a trust-all trusted_proxies is refused');

SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7'), '10.0.0.1'::inet, 'no trusted_proxies row: nobody is trusted');
INSERT INTO rl_settings VALUES ('trusted_proxies', ' 10.0.0.0/8,	::ffff:192.0.2.1 ');
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7'), '203.0.113.7'::inet, 'the row is the trusted list');
SELECT is(rl_client_ip('192.0.2.1', '203.0.113.7'), '203.0.113.7'::inet, 'a mapped entry trusts its IPv4 address');
SELECT throws_ok(format($$UPDATE rl_settings SET value = %L WHERE name = 'trusted_proxies'$$, v), '22023', NULL,
				 format('trusted_proxies %s is refused', v))
FROM unnest(ARRAY['10.0.0.0/8, proxy.example', '10.0.0.0/8,,10.0.0.1']) AS v;

SELECT * FROM finish();
ROLLBACK;
