-- The database of the sqled suite, as a managed service's administrator
-- leaves it: pgTAP and pgcrypto installed, and roles without superuser:
-- rl_sql_owner, which may create objects in schema public only (it installs
-- the SQL edition); rl_sql_app, the application the decision suites run as;
-- rl_sql_plain, an application granted nothing, with a schema of its own.  The pgTAP files ask
-- ratelimit.store which store decides: the tables, here.
CREATE EXTENSION pgtap;
CREATE EXTENSION pgcrypto;
CREATE ROLE rl_sql_owner LOGIN;
CREATE ROLE rl_sql_app LOGIN IN ROLE pg_read_all_settings;
CREATE ROLE rl_sql_plain LOGIN;
CREATE SCHEMA rl_sql_hostile AUTHORIZATION rl_sql_plain;
GRANT CREATE ON SCHEMA public TO rl_sql_owner;
SELECT format('ALTER DATABASE %I SET ratelimit.store = %L', current_database(), 'table') \gexec
