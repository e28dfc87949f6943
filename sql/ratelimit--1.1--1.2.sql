/* ratelimit 1.1 -> 1.2.  A fresh 1.2 install runs ratelimit--1.0.sql, the
 * upgrade to 1.1 and then this file (the Makefile joins them into
 * ratelimit--1.2.sql), so every path makes the same objects by construction;
 * test/t/006_upgrade.pl compares them. */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '1.2'" to load this file. \quit

-- Policies, HTTP and PostgREST (1.2).
-- A changed policy reaches every backend's cache also when logical
-- replication applies it: the apply worker fires row triggers (and
-- TRUNCATE's), not the statement triggers of INSERT, UPDATE and DELETE.
DROP TRIGGER rl_policies_changed ON rl_policies;
CREATE TRIGGER rl_policies_changed
	AFTER INSERT OR UPDATE OR DELETE ON rl_policies
	FOR EACH ROW EXECUTE FUNCTION rl_policies_changed();
CREATE TRIGGER rl_policies_truncated
	AFTER TRUNCATE ON rl_policies
	FOR EACH STATEMENT EXECUTE FUNCTION rl_policies_changed();
ALTER TABLE rl_policies ENABLE ALWAYS TRIGGER rl_policies_changed;
ALTER TABLE rl_policies ENABLE ALWAYS TRIGGER rl_policies_truncated;
-- rl_guard in C, like rl_take: it finds rl_policies and rl_buckets in its own
-- schema, never by a schema name, which ALTER SCHEMA ... RENAME changes and
-- another role could then create.  (CREATE OR REPLACE drops 1.1's
-- search_path setting with the PL/pgSQL body.)
CREATE OR REPLACE FUNCTION rl_guard(limiter text, key text, cost integer DEFAULT 1)
RETURNS void
AS 'MODULE_PATHNAME', 'rl_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
-- rl_headers by policy may read rl_policies at its newest, which a parallel
-- plan cannot do (in a worker or in the leader)
ALTER FUNCTION rl_headers(rl_decision, text) PARALLEL UNSAFE;

-- rl_take_all, answering also each request's own decision (1.2): a client
-- that keeps every bucket's state (the C client's fallback) needs no peek
-- after the call.  The first five columns are rl_take_all's answer.
CREATE TYPE rl_decision_detail AS (
	allowed boolean,
	remaining integer,
	retry_after double precision,
	reset_after double precision,
	limiter text,
	requests rl_decision[]		-- in the order of the arrays
);

CREATE FUNCTION rl_take_all_detail(limiters text[], keys text[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_detail
AS 'MODULE_PATHNAME', 'rl_take_all_detail_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_take_all_detail(limiters text[], keys text[], rates double precision[],
								   bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_detail
AS 'MODULE_PATHNAME', 'rl_take_all_detail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

GRANT EXECUTE ON FUNCTION
	rl_take_all_detail(text[], text[], integer[]),
	rl_take_all_detail(text[], text[], double precision[], integer[], integer[])
TO PUBLIC;
