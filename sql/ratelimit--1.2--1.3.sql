/* ratelimit 1.2 -> 1.3.  A fresh 1.3 install runs ratelimit--1.0.sql and
 * every upgrade after it (the Makefile joins them into ratelimit--1.3.sql),
 * so every path makes the same objects by construction; test/t/006_upgrade.pl
 * compares them. */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '1.3'" to load this file. \quit

-- Lockouts (1.3): a key denied under a policy with a lockout is shut out for
-- lockout, and for lockout_growth times longer (up to lockout_max) each time
-- it offends again within its last lockout's length.  The checks refuse what
-- the rules cannot use; an interval compares as PostgreSQL compares them (a
-- month is 30 days), and the library converts it the same way.  durable
-- (below, rl_buckets_durable) says where the limiter's buckets live.
ALTER TABLE rl_policies
	ADD COLUMN lockout interval,
	ADD COLUMN lockout_growth double precision NOT NULL DEFAULT 1,
	ADD COLUMN lockout_max interval,
	ADD COLUMN durable boolean NOT NULL DEFAULT false,
	ADD CONSTRAINT rl_policies_lockout_check
		CHECK (lockout >= interval '1 second' AND lockout <= interval '366 days'),
	ADD CONSTRAINT rl_policies_lockout_growth_check
		CHECK (lockout_growth >= 1 AND lockout_growth <= 100
			   AND (lockout_growth = 1 OR lockout IS NOT NULL)),
	ADD CONSTRAINT rl_policies_lockout_max_check
		CHECK (lockout_max IS NULL
			   OR (lockout IS NOT NULL AND lockout_max >= lockout
				   AND lockout_max <= interval '366 days'));

-- A bucket's lock: locked while now < lock_until; lock_us is the length of
-- its last lockout (NULL, NULL: never locked).  Columns without a default
-- rewrite nothing, and no index covers them, so updates stay HOT.
ALTER TABLE rl_buckets
	ADD COLUMN lock_until timestamptz,
	ADD COLUMN lock_us bigint;

-- Durable limits (1.3): a policy with durable = true keeps its buckets in
-- this logged table, which a crash, an immediate shutdown or a promotion
-- keeps, at the cost of WAL per row written.  rl_buckets' columns, owner-only
-- like it, no index on tat (updates stay HOT); not dumped: buckets are state.
CREATE TABLE rl_buckets_durable (
	key bytea PRIMARY KEY,
	tat timestamptz NOT NULL,
	interval_us bigint NOT NULL CHECK (interval_us > 0),
	lock_until timestamptz,
	lock_us bigint
);
DO $$
DECLARE
	grantee regrole;
BEGIN
	FOR grantee IN
		SELECT DISTINCT a.grantee::regrole
		FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) AS a
		WHERE c.oid = 'rl_buckets_durable'::regclass AND a.grantee NOT IN (0, c.relowner)
	LOOP
		EXECUTE format('REVOKE ALL ON rl_buckets_durable FROM %s', grantee);
	END LOOP;
	REVOKE ALL ON rl_buckets_durable FROM PUBLIC;
END $$;

-- The policy form at an explicit time, for deterministic tests; revoked like
-- the explicit rl_take_at: a caller who picks the clock can lock a key.
CREATE FUNCTION rl_take_at(limiter text, key text, cost integer, at timestamptz)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_take_at_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_take_at(text, text, integer, timestamptz) FROM PUBLIC;

-- rl_inspect and rl_stats answer the lock state and the lockouts started.
-- Their OUT columns change, so they are made again, with the privileges an
-- administrator granted on the old ones.  Privileges are explicit, whatever
-- ALTER DEFAULT PRIVILEGES says: the new functions that forge time or tell
-- a key's use are for the roles they are granted to.
DO $$
DECLARE
	inspect_grantees text[] := ARRAY(
		SELECT DISTINCT a.grantee::regrole::text
		FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) AS a
		WHERE p.oid = 'rl_inspect(text, text)'::regprocedure
		  AND a.grantee NOT IN (0, p.proowner));
	stats_grantees text[] := ARRAY(
		SELECT DISTINCT a.grantee::regrole::text
		FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) AS a
		WHERE c.oid = 'rl_stats'::regclass AND a.grantee NOT IN (0, c.relowner));
	grantee text;
	fn regprocedure;
	role regrole;
BEGIN
	DROP FUNCTION rl_inspect(text, text);
	CREATE FUNCTION rl_inspect(limiter text, key text, OUT store text,
							   OUT tat timestamptz, OUT interval_us bigint,
							   OUT lock_until timestamptz, OUT lock_us bigint)
	RETURNS record
	AS 'MODULE_PATHNAME', 'rl_inspect'
	LANGUAGE C VOLATILE PARALLEL UNSAFE;
	FOR fn, role IN
		SELECT DISTINCT p.oid::regprocedure, a.grantee::regrole
		FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) AS a
		WHERE p.oid IN ('rl_take_at(text, text, integer, timestamptz)'::regprocedure,
						'rl_inspect(text, text)'::regprocedure)
		  AND a.grantee NOT IN (0, p.proowner)
	LOOP
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', fn, role);
	END LOOP;
	REVOKE EXECUTE ON FUNCTION rl_inspect(text, text) FROM PUBLIC;
	FOREACH grantee IN ARRAY inspect_grantees LOOP
		EXECUTE format('GRANT EXECUTE ON FUNCTION rl_inspect(text, text) TO %s', grantee);
	END LOOP;

	DROP VIEW rl_stats;
	DROP FUNCTION rl_stats_read();
	CREATE FUNCTION rl_stats_read(OUT limiter text, OUT allowed bigint,
								  OUT denied bigint, OUT shadow_denied bigint,
								  OUT since timestamptz, OUT lockouts bigint)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'rl_stats_read'
	LANGUAGE C VOLATILE PARALLEL UNSAFE;
	CREATE VIEW rl_stats AS
		SELECT limiter, allowed, denied, shadow_denied, since, lockouts
		FROM rl_stats_read();
	GRANT SELECT ON rl_stats TO PUBLIC;
	FOREACH grantee IN ARRAY stats_grantees LOOP
		EXECUTE format('GRANT SELECT ON rl_stats TO %s', grantee);
	END LOOP;
END $$;

