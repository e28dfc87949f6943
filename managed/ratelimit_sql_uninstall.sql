/* Removes the SQL edition of ratelimit from the first schema of search_path:
 * its functions, the rl_stats view, its tables (buckets, policies and
 * settings: pg_dump rl_policies first to keep the limits) and its types.
 * Run by the role that installed it.  Nothing else in the schema is touched;
 * an object of the application that depends on the edition (a view over
 * rl_policies, a function returning rl_decision) stops the removal with an
 * error naming it, and nothing is removed. */

DO $uninstall$
DECLARE
	schema_name name := pg_catalog.current_schema();
	fn regprocedure;
BEGIN
	IF schema_name IS NULL THEN
		RAISE EXCEPTION 'no schema to remove ratelimit_sql from' USING ERRCODE = '3F000';
	END IF;
	EXECUTE pg_catalog.format('DROP VIEW IF EXISTS %I.rl_stats', schema_name);
	-- the tables (and the trigger on rl_settings) before the functions
	EXECUTE pg_catalog.format('DROP TABLE IF EXISTS %1$I.rl_buckets, %1$I.rl_buckets_durable, '
							  '%1$I.rl_policies, %1$I.rl_settings', schema_name);
	FOR fn IN
		SELECT p.oid::regprocedure
		FROM pg_catalog.pg_proc p
		WHERE p.pronamespace OPERATOR(pg_catalog.=) (SELECT n.oid FROM pg_catalog.pg_namespace n
													 WHERE n.nspname OPERATOR(pg_catalog.=) schema_name)
		  AND (p.proname OPERATOR(pg_catalog.~) '^rl_sql_'
			   OR p.proname OPERATOR(pg_catalog.=) ANY ('{rl_cleanup,rl_cleanup_runs,rl_client_ip,
					rl_client_ip_forwarded,rl_guard,rl_headers,rl_inspect,rl_ip_key,rl_refund,
					rl_request_ip,rl_reset,rl_stats_read,rl_stats_reset,rl_store_status,rl_take,
					rl_take_all,rl_take_all_detail,rl_take_at}'::name[]))
	LOOP
		EXECUTE pg_catalog.format('DROP FUNCTION %s', fn);
	END LOOP;
	EXECUTE pg_catalog.format('DROP TYPE IF EXISTS %1$I.rl_decision_detail, %1$I.rl_decision_all, '
							  '%1$I.rl_decision, %1$I.rl_sql_verdict, %1$I.rl_sql_limit', schema_name);
END
$uninstall$;
