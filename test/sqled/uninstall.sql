-- The SQL edition installs into the first schema of search_path, with its
-- own privileges whatever ALTER DEFAULT PRIVILEGES grants, again over itself
-- (the same objects, an administrator's grants kept), and
-- managed/ratelimit_sql_uninstall.sql leaves that schema as it found it, an
-- object of the application included.  Run by a superuser (it creates a
-- schema) from the checkout's root.
BEGIN;
SELECT plan(9);
CREATE SCHEMA rl_sql_uninstall;
ALTER DEFAULT PRIVILEGES IN SCHEMA rl_sql_uninstall GRANT EXECUTE ON FUNCTIONS TO rl_sql_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA rl_sql_uninstall GRANT SELECT ON TABLES TO rl_sql_app;
CREATE TABLE rl_sql_uninstall.rl_application_table (id integer);
CREATE TEMP TABLE objects AS
SELECT 'pg_proc' AS catalog, count(*) AS n FROM pg_proc WHERE pronamespace = 'rl_sql_uninstall'::regnamespace
UNION ALL SELECT 'pg_class', count(*) FROM pg_class WHERE relnamespace = 'rl_sql_uninstall'::regnamespace
UNION ALL SELECT 'pg_type', count(*) FROM pg_type WHERE typnamespace = 'rl_sql_uninstall'::regnamespace;
CREATE FUNCTION pg_temp.objects() RETURNS text LANGUAGE sql AS $$
	SELECT format('%s functions, %s relations, %s types',
		(SELECT count(*) FROM pg_proc WHERE pronamespace = 'rl_sql_uninstall'::regnamespace),
		(SELECT count(*) FROM pg_class WHERE relnamespace = 'rl_sql_uninstall'::regnamespace),
		(SELECT count(*) FROM pg_type WHERE typnamespace = 'rl_sql_uninstall'::regnamespace))
$$;
CREATE TEMP TABLE before AS SELECT pg_temp.objects() AS o;

SET LOCAL search_path = rl_sql_uninstall;
\i managed/ratelimit_sql--1.3.sql
SET LOCAL search_path = public;
CREATE TEMP TABLE installed AS SELECT pg_temp.objects() AS o;
SELECT isnt((SELECT o FROM installed), (SELECT o FROM before), 'the edition installs into the schema first on search_path');
SELECT is(rl_sql_uninstall.rl_sql_version(), '1.3', 'and answers its version');
SELECT is(has_function_privilege('rl_sql_app', 'rl_sql_uninstall.rl_reset(text, text)', 'EXECUTE'), false,
		  'default privileges grant no function that is revoked from PUBLIC');
SELECT is(has_table_privilege('rl_sql_app', 'rl_sql_uninstall.rl_buckets', 'SELECT'), false,
		  'nor a table');
SELECT is(has_table_privilege('rl_sql_app', 'rl_sql_uninstall.rl_application_table', 'SELECT'), true,
		  'and leave the application''s own objects alone');
GRANT EXECUTE ON FUNCTION rl_sql_uninstall.rl_reset(text, text) TO rl_sql_app;

SET LOCAL search_path = rl_sql_uninstall;
\i managed/ratelimit_sql--1.3.sql
SET LOCAL search_path = public;
SELECT is(pg_temp.objects(), (SELECT o FROM installed), 'installed again over itself: the same objects');
SELECT is(has_function_privilege('rl_sql_app', 'rl_sql_uninstall.rl_reset(text, text)', 'EXECUTE'), true,
		  'and the grants given since');

SET LOCAL search_path = rl_sql_uninstall;
\i managed/ratelimit_sql_uninstall.sql
SET LOCAL search_path = public;
SELECT is(pg_temp.objects(), (SELECT o FROM before), 'the uninstall removes every object it made');
SELECT has_table('rl_sql_uninstall', 'rl_application_table', 'and nothing else');

SELECT * FROM finish();
ROLLBACK;
