-- rl_refund gives cells back to a live bucket at the T it was stored with.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(19);

-- the stored bucket of a key, in either store
CREATE FUNCTION pg_temp.bucket(text, text) RETURNS rl_buckets
LANGUAGE sql AS $$
	SELECT sha256(convert_to($1, 'UTF8') || '\x00'::bytea || convert_to($2, 'UTF8')),
		   tat, interval_us, lock_until, lock_us
	FROM rl_inspect($1, $2) WHERE store IS NOT NULL
$$;

SELECT rl_take('sign_in', 'ada', 1.0 / 3600, 5, 3);
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.bucket('sign_in', 'ada');
SELECT is(rl_refund('sign_in', 'ada'), true, 'a refund of a live bucket changes it');
SELECT is((SELECT b.tat - a.tat FROM pg_temp.bucket('sign_in', 'ada') b, before a),
		  interval '-1 hour', 'by one cell of its stored T');
SELECT is((rl_take('sign_in', 'ada', 1.0 / 3600, 5, 0)).remaining, 3, 'two cells used now');
SELECT is(rl_refund('sign_in', 'ada', 2), true, 'a refund of two');
SELECT is((rl_take('sign_in', 'ada', 1.0 / 3600, 5, 0)).remaining, 5, 'the bucket is full');
SELECT ok((pg_temp.bucket('sign_in', 'ada')).tat BETWEEN now() AND clock_timestamp(),
		  'its tat is the refund''s now, never earlier');
SELECT is(rl_refund('sign_in', 'ada'), false, 'a full bucket is not changed');
SELECT rl_take('sign_in', 'bob', 1.0 / 3600, 5, 1);
SELECT is(rl_refund('sign_in', 'bob', 100), true, 'a refund beyond what was taken');
SELECT is((rl_take('sign_in', 'bob', 1.0 / 3600, 5, 0)).remaining, 5, 'stops at a full bucket');
SELECT is(rl_refund('sign_in', 'nobody'), false, 'an absent bucket: false');
SELECT ok(pg_temp.bucket('sign_in', 'nobody') IS NULL, 'and nothing written');
SELECT rl_take_at('sign_in', 'passed', 1, 5, 1, now() - interval '1 day');
CREATE TEMP TABLE passed AS
SELECT xmin::text AS x FROM rl_buckets WHERE key = (pg_temp.bucket('sign_in', 'passed')).key;
SELECT is(rl_refund('sign_in', 'passed'), false, 'a passed bucket: false');
SELECT is((SELECT xmin::text FROM rl_buckets WHERE key = (pg_temp.bucket('sign_in', 'passed')).key),
		  (SELECT x FROM passed),
		  'and nothing written');
SELECT is(rl_refund('sign_in', 'ada', 0), false, 'a refund of 0 changes nothing');

SELECT throws_ok(q, s, m, m) FROM (VALUES
	($$SELECT rl_refund(NULL, 'ada')$$, '22004', 'limiter must not be null'),
	($$SELECT rl_refund('sign_in', '')$$, '22023', 'key must not be empty'),
	($$SELECT rl_refund('sign_in', 'ada', NULL)$$, '22004', 'cost must not be null'),
	($$SELECT rl_refund('sign_in', 'ada', -1)$$, '22023', 'cost must not be negative')
) AS t(q, s, m);

CREATE ROLE rl_test_refund_app;
GRANT USAGE ON SCHEMA public TO rl_test_refund_app;
SET LOCAL ROLE rl_test_refund_app;
SELECT throws_ok($$SELECT rl_refund('sign_in', 'ada')$$, '42501',
				 'permission denied for function rl_refund', 'rl_refund is revoked from PUBLIC');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
