-- A database of the SQL edition as a managed service's administrator leaves
-- it (run by the superuser in it): rl_bench_owner, a role without superuser
-- that may create objects in schema public only, installs the edition;
-- rl_bench_app, granted nothing, is the application the runs connect as.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT CREATE ON SCHEMA public TO rl_bench_owner;
