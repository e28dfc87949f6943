-- The extension in a schema of its own, created and recreated in one session:
-- the functions find their table wherever CREATE EXTENSION put it.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(9);

CREATE TEMP TABLE d1 AS SELECT * FROM rl_take_at('s', 'k', 1, 1, 1, '2030-01-01');
SELECT ok((SELECT allowed FROM d1), 'a decision in the default schema');

DROP EXTENSION ratelimit;
CREATE SCHEMA limits;
CREATE EXTENSION ratelimit SCHEMA limits;
SELECT is((SELECT nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		   WHERE relname = 'rl_buckets'), 'limits', 'rl_buckets lives in the schema given');
CREATE TEMP TABLE d2 AS SELECT * FROM limits.rl_take_at('s', 'k', 1, 1, 1, '2030-01-01');
SELECT ok((SELECT allowed FROM d2), 'the same session decides against the new table');
SELECT ok(NOT (limits.rl_take_at('s', 'k', 1, 1, 1, '2030-01-01')).allowed,
		  'and counts there');
SELECT is((SELECT table_buckets::int FROM limits.rl_store_status()),
		  CASE current_setting('ratelimit.store') WHEN 'table' THEN 1 ELSE 0 END,
		  'the bucket is in limits.rl_buckets with the table store, in memory with the memory store');

-- A renamed schema: the session's kept statements name the table anew
SELECT lives_ok($$SELECT limits.rl_reset('s', 'k')$$, 'the statements are prepared');
ALTER SCHEMA limits RENAME TO quotas;
SELECT lives_ok($$SELECT quotas.rl_take_at('s', 'new', 1, 1, 1, '2030-01-01')$$,
				'a new key after ALTER SCHEMA ... RENAME');
SELECT lives_ok($$SELECT quotas.rl_reset('s', 'new')$$, 'rl_reset after the rename');
SELECT lives_ok($$SELECT quotas.rl_cleanup()$$, 'rl_cleanup after the rename');

SELECT * FROM finish();
ROLLBACK;
