-- Run by the owner of the SQL edition: what an administrator grants the
-- application role the decision suites run as (they forge time, inspect,
-- reset and refund keys, and change policies).
GRANT EXECUTE ON FUNCTION
	rl_take_at(text, text, double precision, integer, integer, timestamptz),
	rl_take_at(text, text, integer, timestamptz),
	rl_reset(text, text),
	rl_refund(text, text, integer),
	rl_inspect(text, text),
	rl_cleanup()
TO rl_sql_app;
GRANT INSERT, UPDATE, DELETE, TRUNCATE ON rl_policies TO rl_sql_app;
GRANT SELECT ON rl_buckets, rl_buckets_durable TO rl_sql_app;
