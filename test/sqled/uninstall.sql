-- The SQL edition installs into the first schema of search_path, again over
-- itself (the same objects), and managed/ratelimit_sql_uninstall.sql leaves
-- that schema as it found it, an object of the application included.  Run
-- by a superuser (it creates a schema) from the checkout's root.
BEGIN;
SELECT plan(5);
CREATE SCHEMA rl_sql_uninstall;
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

SET LOCAL search_path = rl_sql_uninstall;
\i managed/ratelimit_sql--1.3.sql
SET LOCAL search_path = public;
SELECT is(pg_temp.objects(), (SELECT o FROM installed), 'installed again over itself: the same objects');

SET LOCAL search_path = rl_sql_uninstall;
\i managed/ratelimit_sql_uninstall.sql
SET LOCAL search_path = public;
SELECT is(pg_temp.objects(), (SELECT o FROM before), 'the uninstall removes every object it made');
SELECT has_table('rl_sql_uninstall', 'rl_application_table', 'and nothing else');

SELECT * FROM finish();
ROLLBACK;
