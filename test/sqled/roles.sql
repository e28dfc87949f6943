-- The SQL edition called by an application role that was granted nothing:
-- it decides, reads the policies and finds client addresses; it cannot
-- forge time, reset, refund, inspect or clean, nor read or write the
-- tables; and no search_path of its own, nor an operator it creates, moves
-- a decision.  Run as a role without grants (rl_sql_plain).
BEGIN;
SELECT plan(21);

SELECT is((rl_take('roles', 'ada', 1.0 / 60, 2)).allowed, true, 'it decides');
SELECT is((rl_take('roles', 'ada', 1.0 / 60, 2)).remaining, 0, 'and spends its budget');
SELECT is((rl_take('roles', 'ada', 1.0 / 60, 2)).allowed, false, 'and is denied past it');
SELECT is(rl_sql_version(), '1.3', 'the installed version');
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7', '{10.0.0.0/8}'), '203.0.113.7'::inet, 'client addresses');
SELECT is(rl_ip_key('2001:db8::1'), '2001:db8::/64', 'address keys');
SELECT lives_ok($$SELECT count(*) FROM rl_policies$$, 'it reads the policies');
SELECT throws_ok($$SELECT * FROM rl_stats$$, '0A000', 'the SQL edition of ratelimit does not count decisions',
				 'rl_stats says the edition does not count');
SELECT throws_ok(q, '42501', NULL, q)
FROM unnest(ARRAY[
	$$SELECT rl_take_at('roles', 'ada', 1000, 1, 1, '2100-01-01')$$,
	$$SELECT rl_reset('roles', 'ada')$$,
	$$SELECT rl_refund('roles', 'ada', 1)$$,
	$$SELECT rl_inspect('roles', 'ada')$$,
	$$SELECT rl_cleanup()$$,
	$$SELECT * FROM rl_buckets$$,
	$$SELECT * FROM rl_settings$$,
	$$INSERT INTO rl_policies VALUES ('roles_policy', 1, 1)$$,
	$$SELECT rl_sql_decide(NULL, false, 0, 0, 0, 0, 0, 1)$$
]) AS q;

-- its own schema (test/sqled/setup.sql), first on its path, with an = on bytea that matches
-- every key, a + on bigint that adds nothing, and types named bytea and
-- inet that are text, usable by every role (the owner of the functions
-- too): the decisions and addresses are the same
GRANT USAGE ON SCHEMA rl_sql_hostile TO PUBLIC;
CREATE DOMAIN rl_sql_hostile.bytea AS pg_catalog.text;
CREATE DOMAIN rl_sql_hostile.inet AS pg_catalog.text;
CREATE FUNCTION rl_sql_hostile.always(bytea, bytea) RETURNS boolean
LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR rl_sql_hostile.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = rl_sql_hostile.always);
CREATE FUNCTION rl_sql_hostile.first(bigint, bigint) RETURNS bigint
LANGUAGE sql AS $$ SELECT $1 $$;
CREATE OPERATOR rl_sql_hostile.+ (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = rl_sql_hostile.first);
SET LOCAL search_path = rl_sql_hostile, pg_catalog, public;
SELECT is((public.rl_take('roles', 'bob', 1.0 / 60, 2)).remaining, 1, 'a hostile path: another key is not this one');
SELECT is((public.rl_take('roles', 'bob', 1.0 / 60, 2)).remaining, 0, 'a hostile path: cells are still spent');
SELECT is((public.rl_take('roles', 'ada', 1.0 / 60, 2, 0)).remaining, 0, 'a hostile path: the first key is still spent');
SELECT is(public.rl_client_ip('10.0.0.1', '203.0.113.7', '{10.0.0.0/8}')::pg_catalog.text, '203.0.113.7/32',
		  'a hostile path: the same client address');
RESET search_path;

SELECT * FROM finish();
ROLLBACK;
