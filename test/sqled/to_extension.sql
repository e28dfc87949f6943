-- From the SQL edition to the C extension as docs/managed.md says
-- (examples/sql/sql_edition_to_extension.sql): keys spent in the edition
-- are as spent in the extension, on an explicit limit, a policy locked out
-- and a durable policy, and the extension answers each as the edition
-- would have.  Run by a superuser (it creates the C extension) from the
-- checkout's root.
BEGIN;
SELECT plan(12);
SET LOCAL ratelimit.in_transaction = allow;
INSERT INTO public.rl_policies (limiter, rate, burst, lockout) VALUES ('move_sign_in', 1.0 / 60, 2, '30 seconds');
INSERT INTO public.rl_policies (limiter, rate, burst, durable) VALUES ('move_reset', 1.0 / 3600, 3, true);
SELECT ok((public.rl_take_at('move_signup', 'ada', 1.0 / 60, 5, 3, '2030-01-01 00:00:00+00')).allowed,
		  'the edition spends an explicit limit');
SELECT ok((public.rl_take_at('move_sign_in', 'ada', 2, '2030-01-01 00:00:00+00')).allowed,
		  'a policy with a lockout');
SELECT ok(NOT (public.rl_take_at('move_sign_in', 'ada', 1, '2030-01-01 00:00:00+00')).allowed,
		  'whose denial locks the key out');
SELECT ok((public.rl_take_at('move_reset', 'ada', 2, '2030-01-01 00:00:00+00')).allowed, 'spends a durable policy');
SELECT ok(EXISTS (SELECT FROM public.rl_buckets WHERE lock_until > '2030-01-01 00:00:20+00')
		  AND EXISTS (SELECT FROM public.rl_buckets_durable WHERE tat > '2030-01-01 00:00:20+00'),
		  'into both tables');

\i examples/sql/sql_edition_to_extension.sql

SELECT is((SELECT count(*) FROM ratelimit_c.rl_policies WHERE limiter ~ '^move_'), 2::bigint,
		  'the extension has the policies');
SELECT is((SELECT durable FROM ratelimit_c.rl_policies WHERE limiter = 'move_reset'), true, 'durable included');

-- the same decision in both, 20 seconds on: the extension's, then the
-- edition's (the extension's touches no row of the edition)
CREATE FUNCTION pg_temp.both(c ratelimit_c.rl_decision, s public.rl_decision) RETURNS text[]
LANGUAGE sql AS $$ SELECT ARRAY[c::text, s::text] $$;
CREATE TEMP TABLE after (name text, c text, s text);
INSERT INTO after
SELECT 'explicit', b[1], b[2] FROM pg_temp.both(
	ratelimit_c.rl_take_at('move_signup', 'ada', 1.0 / 60, 5, 3, '2030-01-01 00:00:20+00'),
	public.rl_take_at('move_signup', 'ada', 1.0 / 60, 5, 3, '2030-01-01 00:00:20+00')) AS b;
INSERT INTO after
SELECT 'locked', b[1], b[2] FROM pg_temp.both(
	ratelimit_c.rl_take_at('move_sign_in', 'ada', 1, '2030-01-01 00:00:20+00'),
	public.rl_take_at('move_sign_in', 'ada', 1, '2030-01-01 00:00:20+00')) AS b;
INSERT INTO after
SELECT 'durable', b[1], b[2] FROM pg_temp.both(
	ratelimit_c.rl_take_at('move_reset', 'ada', 2, '2030-01-01 00:00:20+00'),
	public.rl_take_at('move_reset', 'ada', 2, '2030-01-01 00:00:20+00')) AS b;
INSERT INTO after
SELECT 'fresh', b[1], b[2] FROM pg_temp.both(
	ratelimit_c.rl_take_at('move_reset', 'grace', 2, '2030-01-01 00:00:20+00'),
	public.rl_take_at('move_reset', 'grace', 2, '2030-01-01 00:00:20+00')) AS b;

SELECT is(c, s, 'after the move, ' || name || ': the extension answers as the edition') FROM after ORDER BY name;
SELECT is((SELECT (c::ratelimit_c.rl_decision).allowed FROM after WHERE name = 'explicit'), false,
		  'a key whose budget was spent is denied');
SELECT * FROM finish();
ROLLBACK;
