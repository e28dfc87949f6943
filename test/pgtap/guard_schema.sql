-- rl_guard finds rl_policies and rl_buckets as the C functions do, by its
-- own schema: it keeps working when that schema is renamed, and a role that
-- creates a schema of the old name decides nothing for it.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(6);

INSERT INTO rl_policies (limiter, rate, burst) VALUES ('guard-moved', 1.0 / 3600, 1);
ALTER SCHEMA public RENAME TO rl_moved;
SET LOCAL search_path = rl_moved;
SELECT lives_ok($$SELECT rl_guard('guard-moved', 'ada')$$,
				'after ALTER SCHEMA ... RENAME rl_guard lets the first request through');
SELECT throws_ok($$SELECT rl_guard('guard-moved', 'ada')$$, 'PGRST', NULL,
				 'and answers 429 to the second');

-- another role takes the old name, with an rl_take that allows everything
CREATE ROLE rl_test_hostile;
DO $$ BEGIN
	EXECUTE format('GRANT CREATE ON DATABASE %I TO rl_test_hostile', current_database());
END $$;
GRANT USAGE ON SCHEMA rl_moved TO rl_test_hostile;
SET LOCAL ROLE rl_test_hostile;
CREATE SCHEMA public;
CREATE FUNCTION public.rl_take(limiter text, key text, cost integer DEFAULT 1)
RETURNS rl_moved.rl_decision LANGUAGE sql
AS $$ SELECT ROW(true, 1, 0, 0)::rl_moved.rl_decision $$;
CREATE FUNCTION public.rl_headers(d rl_moved.rl_decision, limiter text)
RETURNS jsonb LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;
GRANT USAGE ON SCHEMA public TO PUBLIC;
RESET ROLE;
SELECT throws_ok($$SELECT rl_guard('guard-moved', 'ada')$$, 'PGRST', NULL,
				 'a schema of the old name does not decide for rl_guard');
SELECT throws_ok($$SELECT rl_guard('guard-moved', 'bob', 2)$$, 'PGRST', NULL,
				 'nor lets a cost above the burst through');
SELECT is((rl_moved.rl_take('guard-moved', 'ada', 0)).remaining, 0,
		  'the key stays spent in the extension''s own store');
SELECT lives_ok($$SELECT rl_guard('guard-moved', 'carol')$$,
				'and another key is still let through once');

SELECT * FROM finish();
ROLLBACK;
