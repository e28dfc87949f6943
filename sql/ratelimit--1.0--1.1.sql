/* ratelimit 1.0 -> 1.1.  A fresh 1.1 install runs ratelimit--1.0.sql and then
 * this file (the Makefile joins them into ratelimit--1.1.sql), so both paths
 * make the same objects by construction; test/t/006_upgrade.pl compares them. */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '1.1'" to load this file. \quit

-- Named limits as data.  Logged, unlike rl_buckets: limits are
-- configuration, kept by pg_dump and replicated.  The checks refuse what
-- rl_take refuses (NaN compares above every number, so it fails the rate check).
CREATE TABLE rl_policies (
	limiter text PRIMARY KEY CONSTRAINT rl_policies_limiter_check CHECK (limiter <> ''),
	rate double precision NOT NULL
		CONSTRAINT rl_policies_rate_check CHECK (rate > 0 AND rate <= 1000000),
	burst integer NOT NULL CONSTRAINT rl_policies_burst_check CHECK (burst >= 1),
	shadow boolean NOT NULL DEFAULT false
);
SELECT pg_catalog.pg_extension_config_dump('rl_policies', '');

-- Every backend caches the policies it used; this trigger makes each change
-- reach every backend's cache at commit (and none when it rolls back).
-- ENABLE ALWAYS: it fires for logical replication and session_replication_role
-- = replica too.
CREATE FUNCTION rl_policies_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policies_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_policies_changed() FROM PUBLIC;
CREATE TRIGGER rl_policies_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rl_policies
	FOR EACH STATEMENT EXECUTE FUNCTION rl_policies_changed();
ALTER TABLE rl_policies ENABLE ALWAYS TRIGGER rl_policies_changed;

-- rl_take by the limiter's policy
CREATE FUNCTION rl_take(limiter text, key text, cost integer DEFAULT 1)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_take_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE TYPE rl_decision_all AS (
	allowed boolean,
	remaining integer,
	retry_after double precision,
	reset_after double precision,
	limiter text				-- the binding limit
);

-- several limits in one decision, all or nothing: by policies, or explicit
CREATE FUNCTION rl_take_all(limiters text[], keys text[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all
AS 'MODULE_PATHNAME', 'rl_take_all_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_take_all(limiters text[], keys text[], rates double precision[],
							bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all
AS 'MODULE_PATHNAME', 'rl_take_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- give cells back: how an application counts only failures
CREATE FUNCTION rl_refund(limiter text, key text, cost integer DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_refund'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_refund(text, text, integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	rl_take(text, text, integer),
	rl_take_all(text[], text[], integer[]),
	rl_take_all(text[], text[], double precision[], integer[], integer[])
TO PUBLIC;

-- Which store decides, how full the memory store is, and how many buckets
-- rl_buckets holds in this database (counting them reads the table).
CREATE FUNCTION rl_store_status(OUT store text, OUT memory_slots bigint,
								OUT memory_used bigint, OUT table_buckets bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_store_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The bucket of one key as stored, wherever it lives: for operators and
-- tests.  Revoked from PUBLIC: it tells when a key was last used.
CREATE FUNCTION rl_inspect(limiter text, key text, OUT store text,
						   OUT tat timestamptz, OUT interval_us bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_inspect'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_inspect(text, text) FROM PUBLIC;

-- Decisions counted by limiter and outcome in this database since the last
-- reset, from shared memory (needs ratelimit in shared_preload_libraries).
-- Names past ratelimit.stats_limiters are counted under a NULL limiter.
CREATE FUNCTION rl_stats_read(OUT limiter text, OUT allowed bigint,
							  OUT denied bigint, OUT shadow_denied bigint,
							  OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_read'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rl_stats AS
	SELECT limiter, allowed, denied, shadow_denied, since FROM rl_stats_read();
GRANT SELECT ON rl_stats TO PUBLIC;

-- Forget this database's counts; for the roles it is granted to.
CREATE FUNCTION rl_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'rl_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_stats_reset() FROM PUBLIC;

-- The cleanup worker's last run in each database of the server.
CREATE FUNCTION rl_cleanup_runs(OUT database text, OUT started timestamptz,
								OUT finished timestamptz, OUT deleted bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_cleanup_runs'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- HTTP: a decision as the IETF RateLimit fields and Retry-After
CREATE FUNCTION rl_headers(d rl_decision, limiter text, rate double precision,
						   burst integer)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'rl_headers'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION rl_headers(d rl_decision, limiter text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'rl_headers_policy'
LANGUAGE C STABLE PARALLEL SAFE;

-- PostgREST: the client address from the request's headers
CREATE FUNCTION rl_request_ip(trusted cidr[] DEFAULT NULL,
							  header text DEFAULT 'x-forwarded-for')
RETURNS inet
AS 'MODULE_PATHNAME', 'rl_request_ip'
LANGUAGE C STABLE PARALLEL SAFE;

-- PostgREST: take by the limiter's policy; a denial is the HTTP 429 that
-- PostgREST builds from SQLSTATE PGRST: the message is the response body,
-- the detail its status and headers.
CREATE FUNCTION rl_guard(limiter text, key text, cost integer DEFAULT 1)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	d rl_decision := rl_take(limiter, key, cost);
	headers jsonb;
BEGIN
	IF NOT d.allowed THEN
		headers := rl_headers(d, limiter);
		RAISE SQLSTATE 'PGRST' USING
			MESSAGE = json_build_object(
				'code', 'RL429',
				'message', 'Too Many Requests',
				'details', format('The rate limit %s is exhausted.', limiter),
				'hint', CASE WHEN headers ? 'Retry-After'
						THEN format('Retry in %s seconds.', headers->>'Retry-After')
						ELSE 'This request costs more than the limit ever allows.' END)::text,
			DETAIL = json_build_object('status', 429, 'headers', headers)::text;
	END IF;
END
$$;
-- The extension's schema follows pg_catalog in rl_guard's search_path (set
-- here rather than by the script's schema placeholder, which refuses schema
-- names with quotes).
DO $$
BEGIN
	EXECUTE format('ALTER FUNCTION rl_guard(text, text, integer) SET search_path = pg_catalog, %I, pg_temp',
				   (SELECT n.nspname FROM pg_catalog.pg_extension e
					JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
					WHERE e.extname = 'ratelimit'));
END $$;

GRANT EXECUTE ON FUNCTION
	rl_headers(rl_decision, text, double precision, integer),
	rl_headers(rl_decision, text),
	rl_request_ip(cidr[], text),
	rl_guard(text, text, integer)
TO PUBLIC;

-- Privileges are explicit, whatever ALTER DEFAULT PRIVILEGES says (1.0
-- revoked only from PUBLIC): the functions that forge time, wipe or give back
-- budgets, or do maintenance are for the roles they are granted to; any role
-- reads the policies, only the owner writes them.
DO $$
DECLARE
	fn regprocedure;
	grantee regrole;
BEGIN
	FOR fn, grantee IN
		SELECT DISTINCT p.oid::regprocedure, a.grantee::regrole
		FROM pg_proc p, aclexplode(p.proacl) AS a
		WHERE p.oid IN ('rl_take_at(text, text, double precision, integer, integer, timestamptz)'::regprocedure,
						'rl_reset(text, text)'::regprocedure,
						'rl_cleanup()'::regprocedure,
						'rl_refund(text, text, integer)'::regprocedure,
						'rl_inspect(text, text)'::regprocedure,
						'rl_policies_changed()'::regprocedure,
						'rl_stats_reset()'::regprocedure)
		  AND a.grantee NOT IN (0, p.proowner)
	LOOP
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', fn, grantee);
	END LOOP;
	FOR grantee IN
		SELECT DISTINCT a.grantee::regrole
		FROM pg_class c, aclexplode(c.relacl) AS a
		WHERE c.oid = 'rl_policies'::regclass AND a.grantee NOT IN (0, c.relowner)
	LOOP
		EXECUTE format('REVOKE ALL ON rl_policies FROM %s', grantee);
	END LOOP;
END $$;
REVOKE ALL ON rl_policies FROM PUBLIC;
GRANT SELECT ON rl_policies TO PUBLIC;
