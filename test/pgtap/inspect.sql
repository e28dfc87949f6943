-- rl_inspect(limiter, key): one key's bucket as stored, in either store.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(6);

SELECT is((SELECT row(store, tat, interval_us)::text FROM rl_inspect('inspect', 'nobody')),
		  '(,,)', 'a key without a bucket: all NULL');
SELECT rl_take_at('inspect', 'ada', 1.0 / 60, 3, 1, '2030-01-01 00:00:00+00');
SELECT is((SELECT store FROM rl_inspect('inspect', 'ada')), current_setting('ratelimit.store'),
		  'the bucket lives in the store in use');
SELECT is((SELECT (tat, interval_us)::text FROM rl_inspect('inspect', 'ada')),
		  ('2030-01-01 00:01:00+00'::timestamptz, 60000000::bigint)::text,
		  'its tat and the T it was written with');
SELECT ok(rl_reset('inspect', 'ada') AND (SELECT store IS NULL FROM rl_inspect('inspect', 'ada')),
		  'rl_reset forgets it wherever it lives');
SELECT throws_ok($$SELECT rl_inspect(NULL, 'k')$$, '22004', 'limiter must not be null',
				 'a NULL limiter is refused');

CREATE ROLE rl_test_inspector;
SET LOCAL ROLE rl_test_inspector;
SELECT throws_ok($$SELECT rl_inspect('inspect', 'ada')$$, '42501', NULL,
				 'rl_inspect is revoked from PUBLIC');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
