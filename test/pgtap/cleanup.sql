-- rl_reset forgets one key; rl_cleanup deletes exactly the buckets whose tat
-- has passed and returns how many.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(9);

CREATE TEMP TABLE spent AS
SELECT rl_take('reset', 'ada', 1.0 / 3600, 1) AS a, rl_take('reset', 'bob', 1.0 / 3600, 1) AS b;
SELECT ok(NOT (rl_take('reset', 'ada', 1.0 / 3600, 1)).allowed, 'ada has spent her budget');
SELECT is(rl_reset('reset', 'ada'), true, 'rl_reset answers true when it removed a bucket');
SELECT ok((rl_take('reset', 'ada', 1.0 / 3600, 1)).allowed, 'after a reset the full budget is back');
SELECT ok(NOT (rl_take('reset', 'bob', 1.0 / 3600, 1)).allowed, 'another key keeps its state');
SELECT is(rl_reset('reset', 'nobody'), false, 'rl_reset answers false for an unknown key');

DELETE FROM rl_buckets;
-- 30 buckets whose tat has passed, 20 still in the future, one at an hour ago
INSERT INTO rl_buckets
SELECT sha256(convert_to('past' || i, 'UTF8')), clock_timestamp() - i * interval '1 minute', 1000000
FROM generate_series(1, 30) AS i;
INSERT INTO rl_buckets
SELECT sha256(convert_to('future' || i, 'UTF8')), clock_timestamp() + i * interval '1 minute', 1000000
FROM generate_series(1, 20) AS i;
SELECT is(rl_cleanup(), 30::bigint, 'rl_cleanup returns the number of buckets it deleted');
SELECT is((SELECT count(*)::int FROM rl_buckets WHERE tat < clock_timestamp()), 0,
		  'no passed bucket is left');
SELECT set_eq('SELECT key FROM rl_buckets',
			  $$SELECT sha256(convert_to('future' || i, 'UTF8')) FROM generate_series(1, 20) AS i$$,
			  'every future bucket stays');
SELECT is(rl_cleanup(), 0::bigint, 'a second run finds nothing');

SELECT * FROM finish();
ROLLBACK;
