/* Removes the SQL edition of ratelimit from the first schema of search_path:
 * its functions, the rl_stats view, its tables (buckets, policies and
 * settings: pg_dump rl_policies first to keep the limits) and its types,
 * every object rl_sql_objects() names.  Run by the role that installed it.
 * Nothing else in the schema is touched; an object of the application that
 * depends on the edition (a view over rl_policies, a function returning
 * rl_decision) stops the removal with an error naming it, and nothing is
 * removed. */

DO $uninstall$
DECLARE
	objects pg_catalog.text[];
	object pg_catalog.text;
BEGIN
	IF pg_catalog.to_regprocedure(pg_catalog.format('%I.rl_sql_objects()', pg_catalog.current_schema())) IS NULL THEN
		RAISE EXCEPTION 'the SQL edition of ratelimit is not installed in schema %', pg_catalog.current_schema()
			USING ERRCODE = '42883';
	END IF;
	-- one statement for each kind (objects that depend on one another go
	-- together): the view, the tables (and the trigger on rl_settings), the
	-- functions, then the types of their arguments and results
	EXECUTE pg_catalog.format(
		'SELECT pg_catalog.array_agg(pg_catalog.format(%L, kind, identities)'
		' ORDER BY pg_catalog.array_position(%L::pg_catalog.text[], kind))'
		' FROM (SELECT kind, pg_catalog.string_agg(identity, %L) AS identities'
		'       FROM %I.rl_sql_objects() GROUP BY kind) AS o',
		'DROP %s %s', '{VIEW,TABLE,FUNCTION,TYPE}', ', ', pg_catalog.current_schema())
		INTO objects;
	FOREACH object IN ARRAY objects LOOP
		EXECUTE object;
	END LOOP;
END
$uninstall$;
