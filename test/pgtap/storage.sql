-- table store only: what rl_buckets holds and how.
-- What rl_buckets holds and how: unlogged, hashed keys, no index on tat, the
-- server clock, and which calls write.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS pgcrypto;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(28);

SELECT is((SELECT relpersistence FROM pg_class WHERE oid = 'rl_buckets'::regclass), 'u',
		  'rl_buckets is unlogged');
SELECT is((SELECT count(*)::int FROM pg_index i
		   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		   WHERE i.indrelid = 'rl_buckets'::regclass AND a.attname = 'tat'), 0,
		  'no index covers tat, so updates can be HOT');
SELECT is((SELECT count(*)::int FROM pg_index WHERE indrelid = 'rl_buckets'::regclass
		   AND indexprs IS NOT NULL), 0, 'no expression index either');
SELECT col_is_pk('rl_buckets', 'key', 'key is the primary key');
SELECT columns_are('rl_buckets',
				   ARRAY['key', 'tat', 'interval_us'] ||
				   CASE WHEN (SELECT extversion FROM pg_extension WHERE extname = 'ratelimit')
							 IN ('1.0', '1.1', '1.2') THEN '{}'::text[]
				   ELSE ARRAY['lock_until', 'lock_us'] END,
				   'the contract''s columns: three, and from 1.3 the lock');
SELECT col_type_is('rl_buckets', 'interval_us', 'bigint', 'interval_us is bigint');

-- keys
CREATE TEMP TABLE d1 AS SELECT * FROM rl_take('auth_login', 'ada@example.com', 10.0 / 900, 10);
SELECT is((SELECT count(*)::int FROM rl_buckets
		   WHERE key = sha256(convert_to('auth_login', 'UTF8') || '\x00'::bytea
							  || convert_to('ada@example.com', 'UTF8'))),
		  1, 'the stored key is sha256(limiter || 0x00 || key)');
SELECT is((SELECT count(*)::int FROM rl_buckets b
		   WHERE position(convert_to('ada@example.com', 'UTF8') IN b.key) > 0
			  OR position(convert_to('auth_login', 'UTF8') IN b.key) > 0
			  OR b::text LIKE '%ada%' OR b::text LIKE '%auth%'), 0,
		  'no row holds the raw key or limiter');
SELECT is((SELECT interval_us FROM rl_buckets
		   WHERE key = sha256(convert_to('auth_login', 'UTF8') || '\x00'::bytea
							  || convert_to('ada@example.com', 'UTF8'))),
		  90000000::bigint, 'interval_us is the T the row was written with (90 s)');

-- the separator keeps ("ab", "c") and ("a", "bc") apart
CREATE TEMP TABLE d2 AS SELECT (rl_take_at('ab', 'c', 1, 1, 1, '2030-01-01')).allowed AS first;
CREATE TEMP TABLE d3 AS SELECT (rl_take_at('a', 'bc', 1, 1, 1, '2030-01-01')).allowed AS second;
SELECT ok((SELECT first FROM d2) AND (SELECT second FROM d3),
		  '("ab","c") and ("a","bc") are different buckets');

-- non-ASCII text hashes its UTF-8 bytes
CREATE TEMP TABLE d4 AS SELECT * FROM rl_take_at('connexion', 'zoë@exemple.fr', 1, 3, 1, '2030-01-01');
SELECT is((SELECT count(*)::int FROM rl_buckets
		   WHERE key = digest(convert_to('connexion', 'UTF8') || '\x00'::bytea
							  || convert_to('zoë@exemple.fr', 'UTF8'), 'sha256')),
		  1, 'a UTF-8 key hashes as its bytes (pgcrypto''s digest agrees)');

-- the server clock when the decision is made, not when the transaction began
SELECT pg_sleep(0.3);
CREATE TEMP TABLE d5 AS SELECT clock_timestamp() AS before_call,
	(rl_take('clock', 'k', 1, 5)).reset_after, clock_timestamp() AS after_call;
SELECT ok((SELECT b.tat - interval '1 second' BETWEEN d.before_call AND d.after_call
		   FROM rl_buckets b, d5 d
		   WHERE b.key = sha256(convert_to('clock', 'UTF8') || '\x00'::bytea || convert_to('k', 'UTF8'))),
		  'tat is the clock at the call plus one interval');
SELECT ok((SELECT before_call > now() + interval '0.25 seconds' FROM d5),
		  'and that clock is not the transaction start');

-- writes: an allowed call writes; a denial, a peek, and cost > burst do not
CREATE TEMP TABLE w AS SELECT * FROM rl_take_at('w', 'k', 1, 2, 2, '2030-01-01 00:00:00');
CREATE VIEW pg_temp.w_row AS
SELECT xmin::text AS row_xmin, ctid::text AS row_ctid, tat, interval_us FROM rl_buckets
WHERE key = sha256(convert_to('w', 'UTF8') || '\x00'::bytea || convert_to('k', 'UTF8'));
CREATE TEMP TABLE w0 AS SELECT * FROM pg_temp.w_row;
SELECT ok(NOT (rl_take_at('w', 'k', 1, 2, 1, '2030-01-01 00:00:00.5')).allowed, 'denied');
SELECT ok((rl_take_at('w', 'k', 1, 2, 0, '2030-01-01 00:00:00.6')).allowed, 'a peek is allowed');
SELECT ok(NOT (rl_take_at('w', 'k', 1, 2, 3, '2030-01-01 00:00:00.7')).allowed, 'cost 3 > burst 2 denied');
SELECT results_eq('SELECT * FROM pg_temp.w_row', 'SELECT * FROM w0',
				  'a denial, a peek and a cost above burst leave the row as it was');
SELECT is((SELECT count(*)::int FROM (SELECT rl_take_at('absent', 'k', 1, 2, 3, '2030-01-01')) s), 1,
		  'cost above burst on an absent key');
SELECT is((SELECT count(*)::int FROM rl_buckets
		   WHERE key = sha256(convert_to('absent', 'UTF8') || '\x00'::bytea || convert_to('k', 'UTF8'))),
		  0, 'writes no row');

-- a lowered limit is written once, even by a denial
SELECT ok(NOT (rl_take_at('w', 'k', 2, 1, 1, '2030-01-01 00:00:01')).allowed,
		  'a lowered limit (2/s, burst 1) on a bucket 1 s in debt denies');
SELECT results_eq('SELECT tat, interval_us FROM pg_temp.w_row',
				  $$VALUES ('2030-01-01 00:00:01.5'::timestamptz, 500000::bigint)$$,
				  'the denial stored the normalised bucket: debt capped at tau, the new T');
CREATE TEMP TABLE w1 AS SELECT * FROM pg_temp.w_row;
SELECT ok(NOT (rl_take_at('w', 'k', 2, 1, 1, '2030-01-01 00:00:01.1')).allowed, 'denied again');
SELECT results_eq('SELECT * FROM pg_temp.w_row', 'SELECT * FROM w1',
				  'the second denial under the same limit writes nothing');

-- a rescaled debt too large for 64 bits is capped at the new tau
CREATE TEMP TABLE o1 AS
SELECT * FROM rl_take_at('o', 'k', 1e6, 2147483647, 2147483647, '2030-01-01 00:00:00+00');
SELECT results_eq(
	$$SELECT allowed, remaining, retry_after, reset_after
	  FROM rl_take_at('o', 'k', 1e6 / 8589934592.0, 1, 1, '2030-01-01 00:00:00+00')$$,
	$$VALUES (false, 0, 8589.934592::float8, 8589.934592::float8)$$,
	'a lowered limit whose rescaled debt exceeds 64 bits denies, capped at tau');
SELECT results_eq(
	$$SELECT tat, interval_us FROM rl_buckets
	  WHERE key = sha256(convert_to('o', 'UTF8') || '\x00'::bytea || convert_to('k', 'UTF8'))$$,
	$$VALUES ('2030-01-01 00:00:00+00'::timestamptz + interval '8589.934592 seconds', 8589934592::bigint)$$,
	'and stores the capped bucket');

-- an index the owner adds (or REINDEX CONCURRENTLY builds) gets an entry for
-- every new row version, as it would from an UPDATE statement: amcheck finds
-- every heap row in every index
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE INDEX rl_test_tat ON rl_buckets (tat);
CREATE TEMP TABLE idx AS
SELECT i, (rl_take_at('idx', 'k', 1, 10, 1, '2030-06-01 00:00:00+00'::timestamptz + i * interval '1 ms')).allowed
FROM generate_series(1, 5) AS i;
SELECT is((SELECT count(*)::int FROM idx WHERE allowed), 5, 'five updates of a bucket with a second index');
SELECT lives_ok($$SELECT bt_index_check('rl_test_tat', true)$$,
				'the added index has an entry for every row version');
SELECT lives_ok($$SELECT bt_index_check('rl_buckets_pkey', true)$$,
				'so has the primary key');

SELECT * FROM finish();
ROLLBACK;
