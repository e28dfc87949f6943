/* ratelimit 1.0 -> 1.1.  A fresh 1.1 install runs ratelimit--1.0.sql and then
 * this file (the Makefile joins them into ratelimit--1.1.sql), so both paths
 * make the same objects by construction; test/t/006_upgrade.pl compares them. */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '1.1'" to load this file. \quit

-- Which store decides, how full the memory store is, and how many buckets
-- rl_buckets holds in this database (counting them reads the table).
CREATE FUNCTION rl_store_status(OUT store text, OUT memory_slots bigint,
								OUT memory_used bigint, OUT table_buckets bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_store_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Privileges are explicit, whatever ALTER DEFAULT PRIVILEGES says (1.0
-- revoked only from PUBLIC): the functions that forge time, wipe or give back
-- budgets, or do maintenance are for the roles they are granted to.
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
						'rl_cleanup()'::regprocedure)
		  AND a.grantee NOT IN (0, p.proowner)
	LOOP
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', fn, grantee);
	END LOOP;
END $$;
