-- Who may do what, and that no search_path can redirect the functions.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(24);

CREATE ROLE rl_test_app;
GRANT USAGE ON SCHEMA public TO rl_test_app;
SET LOCAL ROLE rl_test_app;

SELECT ok((rl_take('login', 'ada', 1.0 / 3600, 2)).allowed, 'a fresh role decides with rl_take without a grant');
SELECT ok((rl_take('login', 'ada', 1.0 / 3600, 2)).remaining = 0, 'and its decisions count');
SELECT throws_ok($$SELECT rl_take_at('login', 'ada', 1, 2, 1, now())$$, '42501',
				 'permission denied for function rl_take_at', 'rl_take_at is revoked from PUBLIC');
SELECT throws_ok($$SELECT rl_reset('login', 'ada')$$, '42501',
				 'permission denied for function rl_reset', 'rl_reset is revoked from PUBLIC');
SELECT throws_ok($$SELECT rl_cleanup()$$, '42501',
				 'permission denied for function rl_cleanup', 'rl_cleanup is for maintenance roles only');
SELECT throws_ok($$SELECT * FROM rl_buckets$$, '42501',
				 'permission denied for table rl_buckets', 'rl_buckets cannot be read');
SELECT throws_ok($$UPDATE rl_buckets SET tat = now()$$, '42501',
				 'permission denied for table rl_buckets', 'rl_buckets cannot be updated');
SELECT throws_ok($$DELETE FROM rl_buckets$$, '42501',
				 'permission denied for table rl_buckets', 'rl_buckets cannot be emptied');
SELECT throws_ok($$INSERT INTO rl_buckets VALUES ('\x00', now(), 1)$$, '42501',
				 'permission denied for table rl_buckets', 'rl_buckets cannot be written');
SELECT throws_ok($$TRUNCATE rl_buckets$$, '42501',
				 'permission denied for table rl_buckets', 'rl_buckets cannot be truncated');
SELECT is(current_user::text, 'rl_test_app', 'rl_take hands the caller''s identity back');
RESET ROLE;

SELECT ok(has_function_privilege('rl_test_app', 'rl_take_at(text, text, double precision, integer, integer, timestamptz)', 'EXECUTE') IS FALSE
		  AND has_function_privilege('rl_test_app', 'rl_reset(text, text)', 'EXECUTE') IS FALSE,
		  'the catalog agrees');

-- A caller's search_path cannot redirect the table or its operators.
CREATE SCHEMA rl_trap;
CREATE TABLE rl_trap.rl_buckets (key bytea PRIMARY KEY, tat timestamptz NOT NULL,
								 interval_us bigint NOT NULL);
CREATE FUNCTION rl_trap.always_equal(bytea, bytea) RETURNS boolean
	LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR rl_trap.= (LEFTARG = bytea, RIGHTARG = bytea, PROCEDURE = rl_trap.always_equal);
GRANT USAGE ON SCHEMA rl_trap TO rl_test_app;
GRANT ALL ON rl_trap.rl_buckets TO rl_test_app;

SET LOCAL ROLE rl_test_app;
SET LOCAL search_path = rl_trap, pg_catalog, public;
CREATE TEMP TABLE first_call AS SELECT * FROM public.rl_take('trap', 'k', 1.0 / 3600, 1);
SELECT ok((SELECT allowed FROM first_call), 'a decision under a hostile search_path');
SELECT ok(NOT (public.rl_take('trap', 'k', 1.0 / 3600, 1)).allowed, 'counts in the real table');
SELECT is((SELECT count(*)::int FROM rl_trap.rl_buckets), 0, 'the look-alike table is untouched');
SET LOCAL search_path = '';
CREATE TEMP TABLE empty_path AS SELECT (public.rl_take('trap', 'k', 1.0 / 3600, 1)).allowed;
RESET ROLE;
RESET search_path;
SELECT ok((SELECT NOT allowed FROM empty_path), 'an empty search_path works too');
-- the memory store keeps the bucket in shared memory, not in a table
SELECT is((SELECT count(*)::int FROM rl_buckets
		   WHERE key = sha256(convert_to('trap', 'UTF8') || '\x00'::bytea || convert_to('k', 'UTF8'))),
		  CASE current_setting('ratelimit.store') WHEN 'table' THEN 1 ELSE 0 END,
		  'the bucket is in the extension''s store');

-- ALTER DEFAULT PRIVILEGES can neither open the table nor close rl_take
DROP EXTENSION ratelimit;
DROP SCHEMA rl_trap CASCADE;
CREATE ROLE rl_test_reader;
GRANT USAGE ON SCHEMA public TO rl_test_reader;
ALTER DEFAULT PRIVILEGES GRANT SELECT, UPDATE ON TABLES TO rl_test_reader;
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO rl_test_reader;
CREATE EXTENSION ratelimit;
SELECT is((SELECT count(*)::int FROM pg_class c, aclexplode(c.relacl) a
		   WHERE c.oid = 'rl_buckets'::regclass AND a.grantee <> c.relowner), 0,
		  'rl_buckets carries no grant but the owner''s despite default privileges');
SET LOCAL ROLE rl_test_reader;
SELECT throws_ok($$SELECT * FROM rl_buckets$$, '42501',
				 'permission denied for table rl_buckets',
				 'a role with default privileges on tables still cannot read it');
SELECT ok((rl_take('login', 'eve', 1, 2)).allowed,
		  'rl_take stays executable by PUBLIC despite default privileges');
SELECT throws_ok($$SELECT rl_take_at('login', 'eve', 1, 2, 1, now())$$, '42501',
				 'permission denied for function rl_take_at',
				 'a role given EXECUTE by default privileges cannot forge time');
SELECT throws_ok($$SELECT rl_reset('login', 'eve')$$, '42501',
				 'permission denied for function rl_reset', 'nor reset budgets');
SELECT throws_ok($$SELECT rl_cleanup()$$, '42501',
				 'permission denied for function rl_cleanup', 'nor run the cleanup');
SELECT ok(rl_ip_key('192.0.2.1') = '192.0.2.1',
		  'rl_ip_key too');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
