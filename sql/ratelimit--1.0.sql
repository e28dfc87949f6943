/* ratelimit 1.0: shared, exact rate limits (GCRA) inside PostgreSQL */

\echo Use "CREATE EXTENSION ratelimit" to load this file. \quit

-- One row per (limiter, key): the key is a SHA-256 (or HMAC-SHA-256) of the
-- pair, never the raw text.  UNLOGGED: no WAL per decision; a crash empties
-- it, which resets budgets.  No index on tat, so every update can be HOT.
CREATE UNLOGGED TABLE rl_buckets (
	key bytea PRIMARY KEY,
	tat timestamptz NOT NULL,
	interval_us bigint NOT NULL CHECK (interval_us > 0)
);
REVOKE ALL ON rl_buckets FROM PUBLIC;

CREATE TYPE rl_decision AS (
	allowed boolean,
	remaining integer,
	retry_after double precision,
	reset_after double precision
);

CREATE FUNCTION rl_take(limiter text, key text, rate double precision,
						burst integer, cost integer DEFAULT 1)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_take'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_take_at(limiter text, key text, rate double precision,
						   burst integer, cost integer, at timestamptz)
RETURNS rl_decision
AS 'MODULE_PATHNAME', 'rl_take_at'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
-- a caller who picks the clock can lock a key far into the future
REVOKE EXECUTE ON FUNCTION rl_take_at(text, text, double precision, integer, integer, timestamptz) FROM PUBLIC;

CREATE FUNCTION rl_reset(limiter text, key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_reset(text, text) FROM PUBLIC;

CREATE FUNCTION rl_cleanup()
RETURNS bigint
AS 'MODULE_PATHNAME', 'rl_cleanup'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
-- maintenance: the owner, a scheduler's role, or the background worker
REVOKE EXECUTE ON FUNCTION rl_cleanup() FROM PUBLIC;

-- Client addresses behind proxies.  The three-argument forms are IMMUTABLE:
-- their answer depends on the arguments only.  None is STRICT: a NULL
-- trusted array trusts nobody and a NULL header has no entries, while a NULL
-- remote answers NULL.  Any role may call them.
CREATE FUNCTION rl_client_ip(remote inet, xff text, trusted cidr[])
RETURNS inet
AS 'MODULE_PATHNAME', 'rl_client_ip'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- trusted from the setting ratelimit.trusted_proxies, hence STABLE
CREATE FUNCTION rl_client_ip(remote inet, xff text)
RETURNS inet
AS 'MODULE_PATHNAME', 'rl_client_ip_from_setting'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION rl_client_ip_forwarded(remote inet, forwarded text, trusted cidr[])
RETURNS inet
AS 'MODULE_PATHNAME', 'rl_client_ip_forwarded'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION rl_ip_key(ip inet, ipv6_prefix integer DEFAULT 64)
RETURNS text
AS 'MODULE_PATHNAME', 'rl_ip_key'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
