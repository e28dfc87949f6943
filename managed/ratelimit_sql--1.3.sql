/* ratelimit_sql 1.3: the SQL edition of ratelimit, for managed PostgreSQL.
 *
 * The objects, signatures, result types, SQLSTATEs and stored keys of the C
 * extension's table store at 1.3, in SQL and PL/pgSQL, installed with no
 * superuser into the first schema of search_path (psql -f, or any migration
 * tool).  Run it again to repair an installation of the same version.
 *
 * The functions that touch the tables run with their owner's rights
 * (SECURITY DEFINER) and find nothing through the caller's search_path:
 * every table, function, type and operator in them is schema-qualified
 * (operators as OPERATOR(pg_catalog.x)), which keeps SQL functions inlined
 * and plans cached, where SET search_path would not.  Keywords (AND, OR, NOT,
 * IS NULL), GREATEST and LEAST, casts and the SQL-standard type names do not
 * depend on search_path.  @extschema@ stands for the schema: a DO block
 * replaces it below, and an extension script (pg_tle) has it replaced
 * already.
 *
 * Times are integers in microseconds after 2000-01-01 UTC, PostgreSQL's own
 * timestamptz unit, and the arithmetic is include/gcra.h's, statement by
 * statement; the C extension and this edition answer identically
 * (test/sqled/equality).
 */

DO $install$
BEGIN
	IF pg_catalog.current_schema() IS NULL THEN
		RAISE EXCEPTION 'no schema to install ratelimit_sql into'
			USING ERRCODE = '3F000',
				  HINT = 'Create the schema, or put an existing one first on search_path.';
	END IF;
END
$install$;

-- Whether this is a first install (privileges below).
DROP TABLE IF EXISTS pg_temp.rl_sql_install;
CREATE TEMP TABLE rl_sql_install AS
SELECT pg_catalog.to_regclass(pg_catalog.format('%I.rl_buckets', pg_catalog.current_schema())) IS NULL AS fresh;

-- Runs one piece of this script with @extschema@ replaced by the schema.
CREATE OR REPLACE PROCEDURE pg_temp.rl_sql_run(script pg_catalog.text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE pg_catalog.replace(script, '@extschema@',
							   pg_catalog.quote_ident(pg_catalog.current_schema()));
END
$$;

CALL pg_temp.rl_sql_run($script$

-- Tables ------------------------------------------------------------------

-- One row per (limiter, key) of a limiter that is not durable: the key is a
-- SHA-256 (or HMAC-SHA-256) of the pair, never the raw text.  UNLOGGED: no
-- WAL per decision; a crash empties it.  No index on tat, so updates are HOT.
CREATE UNLOGGED TABLE IF NOT EXISTS @extschema@.rl_buckets (
	key pg_catalog.bytea PRIMARY KEY,
	tat timestamptz NOT NULL,
	interval_us bigint NOT NULL CHECK (interval_us > 0),
	lock_until timestamptz,
	lock_us bigint
);

-- The buckets of durable limiters: logged, so kept by a crash, replicated
-- and present after a promotion.
CREATE TABLE IF NOT EXISTS @extschema@.rl_buckets_durable (
	key pg_catalog.bytea PRIMARY KEY,
	tat timestamptz NOT NULL,
	interval_us bigint NOT NULL CHECK (interval_us > 0),
	lock_until timestamptz,
	lock_us bigint
);

-- Named limits as data, as the C extension's 1.3 has them.
CREATE TABLE IF NOT EXISTS @extschema@.rl_policies (
	limiter pg_catalog.text PRIMARY KEY CONSTRAINT rl_policies_limiter_check CHECK (limiter <> ''),
	rate double precision NOT NULL
		CONSTRAINT rl_policies_rate_check CHECK (rate > 0 AND rate <= 1000000),
	burst integer NOT NULL CONSTRAINT rl_policies_burst_check CHECK (burst >= 1),
	shadow boolean NOT NULL DEFAULT false,
	lockout interval,
	lockout_growth double precision NOT NULL DEFAULT 1,
	lockout_max interval,
	durable boolean NOT NULL DEFAULT false,
	CONSTRAINT rl_policies_lockout_check
		CHECK (lockout >= interval '1 second' AND lockout <= interval '366 days'),
	CONSTRAINT rl_policies_lockout_growth_check
		CHECK (lockout_growth >= 1 AND lockout_growth <= 100
			   AND (lockout_growth = 1 OR lockout IS NOT NULL)),
	CONSTRAINT rl_policies_lockout_max_check
		CHECK (lockout_max IS NULL
			   OR (lockout IS NOT NULL AND lockout_max >= lockout
				   AND lockout_max <= interval '366 days'))
);

-- What the C extension takes from superuser-only settings: the HMAC secret
-- of stored keys (ratelimit.key_secret) and the two-argument rl_client_ip's
-- trusted proxies (ratelimit.trusted_proxies).  A table only its owner may
-- read or write, never a custom setting: any role may set a placeholder.
CREATE TABLE IF NOT EXISTS @extschema@.rl_settings (
	name pg_catalog.text PRIMARY KEY
		CONSTRAINT rl_settings_name_check CHECK (name IN ('key_secret', 'trusted_proxies')),
	value pg_catalog.text NOT NULL
		CONSTRAINT rl_settings_value_check CHECK (value <> '')
);

-- Types -------------------------------------------------------------------

DO $types$
BEGIN
	IF pg_catalog.to_regtype('@extschema@.rl_decision') IS NULL THEN
		CREATE TYPE @extschema@.rl_decision AS (
			allowed boolean,
			remaining integer,
			retry_after double precision,
			reset_after double precision
		);
		CREATE TYPE @extschema@.rl_decision_all AS (
			allowed boolean,
			remaining integer,
			retry_after double precision,
			reset_after double precision,
			limiter pg_catalog.text
		);
		CREATE TYPE @extschema@.rl_decision_detail AS (
			allowed boolean,
			remaining integer,
			retry_after double precision,
			reset_after double precision,
			limiter pg_catalog.text,
			requests @extschema@.rl_decision[]
		);
		-- gcra.h's GcraDecision
		CREATE TYPE @extschema@.rl_sql_verdict AS (
			allowed boolean,
			store boolean,
			normalised boolean,
			locked boolean,
			lock_started boolean,
			new_tat bigint,
			new_lock_until bigint,
			new_lock_us bigint,
			remaining integer,
			retry_known boolean,
			retry_after bigint,
			reset_after bigint
		);
		-- a limit as gcra.h's GcraLimit has it, and the policy's other columns
		CREATE TYPE @extschema@.rl_sql_limit AS (
			interval_us bigint,
			tolerance_us bigint,
			burst integer,
			lockout_us bigint,
			lockout_max_us bigint,
			lockout_growth double precision,
			shadow boolean,
			durable boolean,
			rate double precision
		);
	END IF;
END
$types$;

-- Time --------------------------------------------------------------------

-- microseconds after 2000-01-01 UTC (an interval's epoch is exact)
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_us(t timestamp with time zone)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT (EXTRACT(epoch FROM
		t OPERATOR(pg_catalog.-) '2000-01-01 00:00:00+00'::timestamp with time zone)
		OPERATOR(pg_catalog.*) 1000000::numeric)::bigint
$$;

-- and back: the time-only intervals add microseconds exactly (a factor of
-- 10^12 microseconds times at most 2^24 is an exact double).  STABLE, as
-- timestamptz + interval is: an IMMUTABLE function with a STABLE body is
-- never inlined, and each call would parse its body again.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_time(us bigint)
RETURNS timestamp with time zone
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
	SELECT '2000-01-01 00:00:00+00'::timestamp with time zone
		OPERATOR(pg_catalog.+) ((us OPERATOR(pg_catalog./) 1000000000000)::double precision
								OPERATOR(pg_catalog.*) interval '1000000 seconds')
		OPERATOR(pg_catalog.+) ((us OPERATOR(pg_catalog.%) 1000000000000)::double precision
								OPERATOR(pg_catalog.*) interval '1 microsecond')
$$;

-- the clock when the decision is made, not when the transaction began
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_now()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT @extschema@.rl_sql_us(pg_catalog.clock_timestamp()) $$;

$script$);

CALL pg_temp.rl_sql_run($script$

-- The arithmetic (include/gcra.h) ---------------------------------------

-- gcra_error_message, with take.c's refuse_limit details
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_refuse(error pg_catalog.text, rate double precision,
														burst integer, cost integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
	IF error OPERATOR(pg_catalog.=) 'cost' THEN
		RAISE EXCEPTION 'cost must not be negative' USING ERRCODE = '22023',
			DETAIL = pg_catalog.format('cost is %s.', cost);
	ELSIF error OPERATOR(pg_catalog.=) 'burst' THEN
		RAISE EXCEPTION 'burst must be at least 1' USING ERRCODE = '22023',
			DETAIL = pg_catalog.format('burst is %s.', burst);
	ELSIF error OPERATOR(pg_catalog.=) 'lockout' THEN
		RAISE EXCEPTION 'lockout must be 1 second to 366 days, lockout_growth 1 to 100, and lockout_max from lockout to 366 days'
			USING ERRCODE = '22023',
			DETAIL = 'The policy''s lockout columns are outside their checks.';
	ELSIF error OPERATOR(pg_catalog.=) 'rate' THEN
		IF rate OPERATOR(pg_catalog.=) 0::double precision THEN
			-- a rate of 0 is mostly 5/60 in SQL: an integer division
			RAISE EXCEPTION 'rate must be a finite number of requests per second above 0 and at most 1000000'
				USING ERRCODE = '22023',
				DETAIL = pg_catalog.format('rate is %s per second, burst is %s.', rate, burst),
				HINT = 'A rate is in requests per second, and 5/60 divides integers (0): write 5.0/60.';
		END IF;
		RAISE EXCEPTION 'rate must be a finite number of requests per second above 0 and at most 1000000'
			USING ERRCODE = '22023',
			DETAIL = pg_catalog.format('rate is %s per second, burst is %s.', rate, burst);
	END IF;
	RAISE EXCEPTION 'burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range'
		USING ERRCODE = '22023',
		DETAIL = pg_catalog.format('rate is %s per second, burst is %s.', rate, burst);
END
$$;

-- gcra_limit_init and gcra_lockout_init for a decision of cost at now (the
-- latest timestamptz is 9223371331199999999), refusing what they refuse;
-- lockout_us 0 is none, max_us 0 is lockout_us.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_limit(rate double precision, burst integer,
													   cost integer, now bigint,
													   lockout_us bigint DEFAULT 0,
													   growth double precision DEFAULT 1,
													   max_us bigint DEFAULT 0)
RETURNS @extschema@.rl_sql_limit
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	l @extschema@.rl_sql_limit;
	exact double precision;
	whole double precision;
BEGIN
	-- NaN compares above every number in PostgreSQL
	IF rate OPERATOR(pg_catalog.<=) 0::double precision
		OR rate OPERATOR(pg_catalog.>) 1000000::double precision THEN
		PERFORM @extschema@.rl_sql_refuse('rate', rate, burst, cost);
	END IF;
	IF burst OPERATOR(pg_catalog.<) 1 THEN
		PERFORM @extschema@.rl_sql_refuse('burst', rate, burst, cost);
	END IF;
	-- C's round(): halves away from zero (PostgreSQL's round() of a double
	-- halves to even)
	-- (below 1e-300 the division overflows; T would exceed 2^62 anyway)
	IF rate OPERATOR(pg_catalog.<) 1e-300::double precision THEN
		PERFORM @extschema@.rl_sql_refuse('tolerance', rate, burst, cost);
	END IF;
	exact := 1e6::double precision OPERATOR(pg_catalog./) rate;
	whole := pg_catalog.trunc(exact);
	IF exact OPERATOR(pg_catalog.-) whole OPERATOR(pg_catalog.>=) 0.5::double precision THEN
		whole := whole OPERATOR(pg_catalog.+) 1::double precision;
	END IF;
	whole := GREATEST(whole, 1::double precision);
	IF whole OPERATOR(pg_catalog.>=) 4611686018427387904::double precision THEN
		PERFORM @extschema@.rl_sql_refuse('tolerance', rate, burst, cost);
	END IF;
	IF whole::bigint::numeric OPERATOR(pg_catalog.*) burst OPERATOR(pg_catalog.*) 2
		OPERATOR(pg_catalog.+) now OPERATOR(pg_catalog.>) 9223371331199999999::numeric THEN
		PERFORM @extschema@.rl_sql_refuse('tolerance', rate, burst, cost);
	END IF;
	l.interval_us := whole::bigint;
	l.tolerance_us := l.interval_us OPERATOR(pg_catalog.*) burst;
	l.burst := burst;
	l.lockout_us := 0;
	l.lockout_max_us := 0;
	l.lockout_growth := 1;
	l.shadow := false;
	l.durable := false;
	l.rate := rate;
	IF lockout_us OPERATOR(pg_catalog.>) 0 THEN
		IF max_us OPERATOR(pg_catalog.=) 0 THEN
			max_us := lockout_us;
		END IF;
		IF lockout_us OPERATOR(pg_catalog.<) 1000000
			OR lockout_us OPERATOR(pg_catalog.>) 31622400000000
			OR max_us OPERATOR(pg_catalog.<) lockout_us
			OR max_us OPERATOR(pg_catalog.>) 31622400000000
			OR NOT (growth OPERATOR(pg_catalog.>=) 1::double precision
					AND growth OPERATOR(pg_catalog.<=) 100::double precision) THEN
			PERFORM @extschema@.rl_sql_refuse('lockout', rate, burst, cost);
		END IF;
		IF now OPERATOR(pg_catalog.>) (9223371331199999999
			OPERATOR(pg_catalog.-) (2 OPERATOR(pg_catalog.*) max_us)) THEN
			PERFORM @extschema@.rl_sql_refuse('tolerance', rate, burst, cost);
		END IF;
		l.lockout_us := lockout_us;
		l.lockout_max_us := max_us;
		l.lockout_growth := growth;
	END IF;
	IF cost OPERATOR(pg_catalog.<) 0 THEN
		PERFORM @extschema@.rl_sql_refuse('cost', rate, burst, cost);
	END IF;
	RETURN l;
END
$$;

-- gcra_report: the bucket after a decision
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_report(v @extschema@.rl_sql_verdict,
														l @extschema@.rl_sql_limit,
														now bigint, tat_after bigint)
RETURNS @extschema@.rl_sql_verdict
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	span bigint := now OPERATOR(pg_catalog.+) l.tolerance_us OPERATOR(pg_catalog.-) tat_after;
	cells bigint := span OPERATOR(pg_catalog./) l.interval_us;
BEGIN
	-- floor division
	IF span OPERATOR(pg_catalog.<) 0
		AND span OPERATOR(pg_catalog.%) l.interval_us OPERATOR(pg_catalog.<>) 0 THEN
		cells := cells OPERATOR(pg_catalog.-) 1;
	END IF;
	v.new_tat := tat_after;
	v.remaining := GREATEST(0, LEAST(l.burst, cells));
	v.reset_after := GREATEST(tat_after OPERATOR(pg_catalog.-) now, 0);
	RETURN v;
END
$$;

-- gcra_decide: a request of cost at now against a bucket (present false: no
-- row; lock_until and lock_us 0: never locked)
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_decide(l @extschema@.rl_sql_limit,
														present boolean, tat bigint,
														stored_interval bigint,
														lock_until bigint, lock_us bigint,
														now bigint, cost integer)
RETURNS @extschema@.rl_sql_verdict
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	v @extschema@.rl_sql_verdict;
	stored_debt bigint;
	debt bigint := 0;
	normalised boolean := false;
	tat_used bigint;
	tat_after bigint;
	new_tat bigint;
	length bigint;
BEGIN
	v.normalised := false;
	v.locked := false;
	v.lock_started := false;
	v.retry_after := 0;
	IF present AND tat OPERATOR(pg_catalog.>=) now THEN
		-- carried over in cells, capped at tau (numeric: 128 bits in gcra.h)
		stored_debt := tat OPERATOR(pg_catalog.-) now;
		IF stored_interval OPERATOR(pg_catalog.=) l.interval_us THEN
			debt := LEAST(stored_debt, l.tolerance_us);
		ELSE
			debt := LEAST(pg_catalog.div(stored_debt::numeric OPERATOR(pg_catalog.*) l.interval_us,
										 stored_interval::numeric),
						  l.tolerance_us::numeric)::bigint;
		END IF;
		normalised := debt OPERATOR(pg_catalog.<>) stored_debt
			OR stored_interval OPERATOR(pg_catalog.<>) l.interval_us;
	END IF;
	tat_used := now OPERATOR(pg_catalog.+) debt;
	v.new_lock_until := lock_until;
	v.new_lock_us := lock_us;

	IF l.lockout_us OPERATOR(pg_catalog.>) 0 AND lock_us OPERATOR(pg_catalog.>) 0
		AND now OPERATOR(pg_catalog.<) lock_until THEN
		-- locked: nothing spent, nothing stored, not even the normalisation
		v.allowed := cost OPERATOR(pg_catalog.=) 0;
		v.store := false;
		v.retry_known := true;
		IF NOT v.allowed THEN
			v.retry_after := lock_until OPERATOR(pg_catalog.-) now;
		END IF;
		v.locked := true;
		v.new_tat := tat_used;
		v.remaining := 0;
		v.reset_after := GREATEST(tat_used, lock_until) OPERATOR(pg_catalog.-) now;
		RETURN v;
	END IF;

	IF cost OPERATOR(pg_catalog.=) 0 THEN
		-- a peek: always allowed, never written
		v.allowed := true;
		v.retry_known := true;
		tat_after := tat_used;
	ELSIF cost OPERATOR(pg_catalog.>) l.burst THEN
		v.allowed := false;
		v.retry_known := false;
		tat_after := tat_used;
	ELSE
		new_tat := tat_used OPERATOR(pg_catalog.+) (cost::bigint OPERATOR(pg_catalog.*) l.interval_us);
		v.allowed := new_tat OPERATOR(pg_catalog.-) now OPERATOR(pg_catalog.<=) l.tolerance_us;
		v.retry_known := true;
		IF v.allowed THEN
			tat_after := new_tat;
		ELSE
			v.retry_after := new_tat OPERATOR(pg_catalog.-) now OPERATOR(pg_catalog.-) l.tolerance_us;
			tat_after := tat_used;
		END IF;
	END IF;
	v.normalised := normalised;
	v.store := cost OPERATOR(pg_catalog.>) 0 AND (v.allowed OR normalised);

	IF NOT v.allowed AND v.retry_known AND l.lockout_us OPERATOR(pg_catalog.>) 0 THEN
		-- a lockout starts, longer when the last one ended no longer ago
		-- than it lasted
		IF lock_until OPERATOR(pg_catalog.<=) now
			AND now OPERATOR(pg_catalog.<) (lock_until OPERATOR(pg_catalog.+) lock_us) THEN
			length := LEAST(l.lockout_max_us,
							GREATEST(l.lockout_us,
									 pg_catalog.floor(lock_us::double precision
													  OPERATOR(pg_catalog.*) l.lockout_growth)::bigint));
		ELSE
			length := l.lockout_us;
		END IF;
		v.lock_started := true;
		v.store := true;
		v.new_lock_until := now OPERATOR(pg_catalog.+) length;
		v.new_lock_us := length;
		v.retry_after := length;
		v.locked := true;
		v.new_tat := tat_used;
		v.remaining := 0;
		v.reset_after := GREATEST(tat_used, v.new_lock_until) OPERATOR(pg_catalog.-) now;
		RETURN v;
	END IF;
	RETURN @extschema@.rl_sql_report(v, l, now, tat_after);
END
$$;

-- A verdict as rl_decision; a shadow one answers allowed, retry_after 0.
-- It reads v several times, so it is inlined only when v is a variable,
-- never a call of a volatile function.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_decision(v @extschema@.rl_sql_verdict,
														  shadow boolean)
RETURNS @extschema@.rl_decision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT ROW(v.allowed OR shadow, v.remaining,
			   CASE WHEN v.allowed OR shadow THEN 0::double precision
					WHEN v.retry_known
					THEN v.retry_after::double precision OPERATOR(pg_catalog./) 1000000::double precision
			   END,
			   v.reset_after::double precision OPERATOR(pg_catalog./) 1000000::double precision
			  )::@extschema@.rl_decision
$$;

$script$);

CALL pg_temp.rl_sql_run($script$

-- Arguments ---------------------------------------------------------------

CREATE OR REPLACE FUNCTION @extschema@.rl_sql_require(value anyelement, name pg_catalog.text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', name USING ERRCODE = '22004';
	END IF;
END
$$;

-- limiter and key: present and not empty
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_require_text(value pg_catalog.text, name pg_catalog.text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', name USING ERRCODE = '22004';
	END IF;
	IF value OPERATOR(pg_catalog.=) '' THEN
		RAISE EXCEPTION '% must not be empty', name USING ERRCODE = '22023';
	END IF;
END
$$;

-- A standby's buckets would answer differently from its primary's (and an
-- unlogged table is unreadable there): every function that decides or
-- touches buckets refuses.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_refuse_recovery(function pg_catalog.text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
	IF pg_catalog.pg_is_in_recovery() THEN
		RAISE EXCEPTION '% cannot run on a hot standby', function
			USING ERRCODE = '25006',
				  DETAIL = 'Rate-limit buckets live in an unlogged table, which is empty and unreadable during recovery.',
				  HINT = 'Send rate-limit calls to the primary.';
	END IF;
END
$$;

-- the time argument at: present and finite, in microseconds
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_at(at timestamp with time zone)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
	IF at IS NULL THEN
		RAISE EXCEPTION 'at must not be null' USING ERRCODE = '22004';
	END IF;
	IF NOT pg_catalog.isfinite(at) THEN
		RAISE EXCEPTION 'at must be a finite timestamp' USING ERRCODE = '22023';
	END IF;
	RETURN @extschema@.rl_sql_us(at);
END
$$;

-- Stored keys -------------------------------------------------------------

-- sha256(limiter || '\x00' || key), or HMAC-SHA-256 under the secret of
-- rl_settings (pgcrypto's hmac, wherever pgcrypto is installed).  Text
-- cannot hold a NUL byte, so the pair is unambiguous.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_key(limiter pg_catalog.text, key pg_catalog.text)
RETURNS pg_catalog.bytea
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
	message pg_catalog.bytea := pg_catalog.convert_to(limiter, pg_catalog.getdatabaseencoding())
		OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
		OPERATOR(pg_catalog.||) pg_catalog.convert_to(key, pg_catalog.getdatabaseencoding());
	secret pg_catalog.text;
	hmac pg_catalog.text;
	digest pg_catalog.bytea;
BEGIN
	SELECT s.value INTO secret FROM @extschema@.rl_settings s
	WHERE s.name OPERATOR(pg_catalog.=) 'key_secret';
	IF secret IS NULL THEN
		RETURN pg_catalog.sha256(message);
	END IF;
	SELECT pg_catalog.format('%I.hmac', n.nspname) INTO hmac
	FROM pg_catalog.pg_extension e
	JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
	WHERE e.extname OPERATOR(pg_catalog.=) 'pgcrypto';
	IF hmac IS NULL THEN
		RAISE EXCEPTION 'a key secret is set in rl_settings, and pgcrypto is not installed'
			USING ERRCODE = '55000',
				  HINT = 'CREATE EXTENSION pgcrypto, or delete the key_secret row (which starts every budget afresh).';
	END IF;
	EXECUTE pg_catalog.format('SELECT %s($1, $2, %L::pg_catalog.text)', hmac, 'sha256')
		INTO digest
		USING message, pg_catalog.convert_to(secret, pg_catalog.getdatabaseencoding());
	RETURN digest;
END
$$;

-- Policies ----------------------------------------------------------------

-- an interval in microseconds as PostgreSQL compares intervals (a month is
-- 30 days, a day 24 hours)
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_interval_us(span interval)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT COALESCE(
		((EXTRACT(year FROM span) OPERATOR(pg_catalog.*) 12 OPERATOR(pg_catalog.+) EXTRACT(month FROM span))
		 OPERATOR(pg_catalog.*) 30 OPERATOR(pg_catalog.+) EXTRACT(day FROM span))
		OPERATOR(pg_catalog.*) 86400000000
		OPERATOR(pg_catalog.+) (EXTRACT(epoch FROM span OPERATOR(pg_catalog.-) pg_catalog.make_interval(
			0, (EXTRACT(year FROM span) OPERATOR(pg_catalog.*) 12 OPERATOR(pg_catalog.+) EXTRACT(month FROM span))::integer,
			0, EXTRACT(day FROM span)::integer)) OPERATOR(pg_catalog.*) 1000000), 0)::bigint
$$;

-- The limit of limiter's policy for a decision of cost at now; an unknown
-- limiter is an error naming it.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_policy(limiter pg_catalog.text, cost integer, now bigint)
RETURNS @extschema@.rl_sql_limit
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
	p @extschema@.rl_policies;
	l @extschema@.rl_sql_limit;
BEGIN
	SELECT * INTO p FROM @extschema@.rl_policies r WHERE r.limiter OPERATOR(pg_catalog.=) rl_sql_policy.limiter;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'limiter "%" has no policy', limiter
			USING ERRCODE = '42704',
				  HINT = 'Add it to rl_policies, or pass rate and burst explicitly.';
	END IF;
	l := @extschema@.rl_sql_limit(p.rate, p.burst, cost, now,
								   @extschema@.rl_sql_interval_us(p.lockout), p.lockout_growth,
								   @extschema@.rl_sql_interval_us(p.lockout_max));
	l.shadow := p.shadow;
	l.durable := p.durable;
	RETURN l;
END
$$;

-- The explicit forms are for limiters without a policy: with one, any
-- caller could change its limit, and by the limit-change rule reset it.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_refuse_explicit(limiter pg_catalog.text, function pg_catalog.text,
																 policy_form pg_catalog.text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
	PERFORM FROM @extschema@.rl_policies r WHERE r.limiter OPERATOR(pg_catalog.=) rl_sql_refuse_explicit.limiter;
	IF FOUND THEN
		RAISE EXCEPTION 'limiter "%" has a policy: % cannot set its limit', limiter, function
			USING ERRCODE = '42501',
				  DETAIL = 'A limiter with a row in rl_policies is decided by its policy only.',
				  HINT = pg_catalog.format('Call %s, the policy form.', policy_form);
	END IF;
END
$$;

$script$);

-- The decision on one key, in each bucket table from one text: static
-- statements keep their plans cached.  The first read takes no lock, and a
-- decision that stores nothing (a denial, a peek) returns from it; one that
-- stores locks the row, reads the clock and decides again on the newest
-- version, so concurrent decisions on a key are exact and in order.
DO $tables$
DECLARE
	bucket_table pg_catalog.text;
BEGIN
	FOREACH bucket_table IN ARRAY ARRAY['rl_buckets', 'rl_buckets_durable'] LOOP
		CALL pg_temp.rl_sql_run(pg_catalog.replace($script$

-- The lock columns of a decision: NULL, NULL for a key never locked.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_take_@table@(k pg_catalog.bytea, l @extschema@.rl_sql_limit,
															  now bigint, at_given boolean,
															  cost integer)
RETURNS @extschema@.rl_sql_verdict
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
	b record;
	present boolean;
	v @extschema@.rl_sql_verdict;
BEGIN
	SELECT t.tat, t.interval_us, t.lock_until, t.lock_us INTO b
	FROM @extschema@.@table@ t WHERE t.key OPERATOR(pg_catalog.=) k;
	present := FOUND;
	v := @extschema@.rl_sql_decide(l, present, @extschema@.rl_sql_us(b.tat), b.interval_us,
								   COALESCE(@extschema@.rl_sql_us(b.lock_until), 0),
								   COALESCE(b.lock_us, 0), now, cost);
	IF NOT v.store THEN
		RETURN v;
	END IF;
	LOOP
		SELECT t.tat, t.interval_us, t.lock_until, t.lock_us INTO b
		FROM @extschema@.@table@ t WHERE t.key OPERATOR(pg_catalog.=) k FOR UPDATE;
		present := FOUND;
		IF NOT at_given THEN
			now := @extschema@.rl_sql_now();
		END IF;
		v := @extschema@.rl_sql_decide(l, present, @extschema@.rl_sql_us(b.tat), b.interval_us,
									   COALESCE(@extschema@.rl_sql_us(b.lock_until), 0),
									   COALESCE(b.lock_us, 0), now, cost);
		IF present THEN
			IF v.store THEN
				UPDATE @extschema@.@table@ t
				SET tat = @extschema@.rl_sql_time(v.new_tat), interval_us = l.interval_us,
					lock_until = CASE WHEN v.new_lock_us OPERATOR(pg_catalog.<>) 0
									  THEN @extschema@.rl_sql_time(v.new_lock_until) END,
					lock_us = CASE WHEN v.new_lock_us OPERATOR(pg_catalog.<>) 0
								   THEN v.new_lock_us END
				WHERE t.key OPERATOR(pg_catalog.=) k;
			END IF;
			RETURN v;
		END IF;
		IF NOT v.store THEN
			RETURN v;
		END IF;
		-- a concurrent first decision on the key wins; then its row is locked
		INSERT INTO @extschema@.@table@ AS t (key, tat, interval_us, lock_until, lock_us)
		VALUES (k, @extschema@.rl_sql_time(v.new_tat), l.interval_us,
				CASE WHEN v.new_lock_us OPERATOR(pg_catalog.<>) 0
					 THEN @extschema@.rl_sql_time(v.new_lock_until) END,
				CASE WHEN v.new_lock_us OPERATOR(pg_catalog.<>) 0 THEN v.new_lock_us END)
		ON CONFLICT (key) DO NOTHING;
		IF FOUND THEN
			RETURN v;
		END IF;
	END LOOP;
END
$$;

$script$, '@table@', bucket_table));
	END LOOP;
END
$tables$;

CALL pg_temp.rl_sql_run($script$

-- Deciding ----------------------------------------------------------------

-- a decision on one key in the table of its limit
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_take_key(k pg_catalog.bytea, l @extschema@.rl_sql_limit,
														  now bigint, at_given boolean,
														  cost integer)
RETURNS @extschema@.rl_sql_verdict
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
	SELECT CASE WHEN l.durable
		   THEN @extschema@.rl_sql_take_rl_buckets_durable(k, l, now, at_given, cost)
		   ELSE @extschema@.rl_sql_take_rl_buckets(k, l, now, at_given, cost) END
$$;

-- The body of the explicit rl_take and rl_take_at (now: at, when at_given).
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_take_explicit(function pg_catalog.text, limiter pg_catalog.text,
															   key pg_catalog.text, rate double precision,
															   burst integer, cost integer,
															   now bigint, at_given boolean)
RETURNS @extschema@.rl_decision
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
	v @extschema@.rl_sql_verdict;
BEGIN
	IF limiter IS NULL OR limiter OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(limiter, 'limiter');
	END IF;
	IF key IS NULL OR key OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(key, 'key');
	END IF;
	IF rate IS NULL THEN
		PERFORM @extschema@.rl_sql_require(rate, 'rate');
	END IF;
	IF burst IS NULL THEN
		PERFORM @extschema@.rl_sql_require(burst, 'burst');
	END IF;
	IF cost IS NULL THEN
		PERFORM @extschema@.rl_sql_require(cost, 'cost');
	END IF;
	-- first, as in rl_take_all: a policy's limiter, whatever the limit
	PERFORM @extschema@.rl_sql_refuse_explicit(limiter, function, 'rl_take(limiter, key, cost)');
	IF NOT at_given THEN
		now := @extschema@.rl_sql_now();
	END IF;
	IF pg_catalog.pg_is_in_recovery() THEN
		PERFORM @extschema@.rl_sql_refuse_recovery(function);
	END IF;
	v := @extschema@.rl_sql_take_rl_buckets(@extschema@.rl_sql_key(limiter, key),
											 @extschema@.rl_sql_limit(rate, burst, cost, now),
											 now, at_given, cost);
	RETURN @extschema@.rl_sql_decision(v, false);
END
$$;

-- The body of rl_take(limiter, key, cost), its rl_take_at and rl_guard.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_take_policy(function pg_catalog.text, limiter pg_catalog.text, key pg_catalog.text, cost integer,
															 now bigint, at_given boolean)
RETURNS @extschema@.rl_decision
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
	l @extschema@.rl_sql_limit;
	k pg_catalog.bytea;
	v @extschema@.rl_sql_verdict;
BEGIN
	IF limiter IS NULL OR limiter OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(limiter, 'limiter');
	END IF;
	IF key IS NULL OR key OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(key, 'key');
	END IF;
	IF cost IS NULL THEN
		PERFORM @extschema@.rl_sql_require(cost, 'cost');
	END IF;
	IF NOT at_given THEN
		now := @extschema@.rl_sql_now();
	END IF;
	l := @extschema@.rl_sql_policy(limiter, cost, now);
	IF pg_catalog.pg_is_in_recovery() THEN
		PERFORM @extschema@.rl_sql_refuse_recovery(function);
	END IF;
	-- a variable, so that rl_sql_take_key, which reads it twice, is inlined
	k := @extschema@.rl_sql_key(limiter, key);
	v := @extschema@.rl_sql_take_key(k, l, now, at_given, cost);
	RETURN @extschema@.rl_sql_decision(v, l.shadow);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take(limiter pg_catalog.text, key pg_catalog.text, rate double precision,
												  burst integer, cost integer DEFAULT 1)
RETURNS @extschema@.rl_decision
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$ BEGIN RETURN @extschema@.rl_sql_take_explicit('rl_take', limiter, key, rate, burst, cost, NULL, false); END $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take_at(limiter pg_catalog.text, key pg_catalog.text, rate double precision,
													 burst integer, cost integer,
													 at timestamp with time zone)
RETURNS @extschema@.rl_decision
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$ BEGIN RETURN @extschema@.rl_sql_take_explicit('rl_take_at', limiter, key, rate, burst, cost,
											@extschema@.rl_sql_at(at), true); END $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take(limiter pg_catalog.text, key pg_catalog.text, cost integer DEFAULT 1)
RETURNS @extschema@.rl_decision
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$ BEGIN RETURN @extschema@.rl_sql_take_policy('rl_take', limiter, key, cost, NULL, false); END $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take_at(limiter pg_catalog.text, key pg_catalog.text, cost integer,
													 at timestamp with time zone)
RETURNS @extschema@.rl_decision
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$ BEGIN RETURN @extschema@.rl_sql_take_policy('rl_take_at', limiter, key, cost, @extschema@.rl_sql_at(at), true); END $$;

-- Several limits in one decision ----------------------------------------

-- an array argument: present, one dimension, no NULL or empty element, and
-- as many elements as want (-1: 1 to 16)
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_array(value anyarray, name pg_catalog.text, want integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	n integer := COALESCE(pg_catalog.cardinality(value), 0);
	i integer := 0;
	element pg_catalog.text;
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', name USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(value) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION '% must be a one-dimensional array', name USING ERRCODE = '22023';
	END IF;
	IF want OPERATOR(pg_catalog.<) 0 AND (n OPERATOR(pg_catalog.<) 1 OR n OPERATOR(pg_catalog.>) 16) THEN
		RAISE EXCEPTION '% must have 1 to 16 elements', name USING ERRCODE = '22023',
			DETAIL = pg_catalog.format('It has %s.', n);
	END IF;
	IF want OPERATOR(pg_catalog.>=) 0 AND n OPERATOR(pg_catalog.<>) want THEN
		RAISE EXCEPTION '% must have as many elements as limiters', name USING ERRCODE = '22023',
			DETAIL = pg_catalog.format('limiters has %s, %s has %s.', want, name, n);
	END IF;
	FOREACH element IN ARRAY value::pg_catalog.text[] LOOP
		i := i OPERATOR(pg_catalog.+) 1;
		IF element IS NULL THEN
			RAISE EXCEPTION '% must not contain NULL', name USING ERRCODE = '22004',
				DETAIL = pg_catalog.format('%s[%s] is NULL.', name, i);
		END IF;
		IF element OPERATOR(pg_catalog.=) '' THEN
			RAISE EXCEPTION '% must not contain an empty string', name USING ERRCODE = '22023',
				DETAIL = pg_catalog.format('%s[%s] is empty.', name, i);
		END IF;
	END LOOP;
END
$$;

-- gcra_decide_all: every request at one now; when an enforced one is
-- denied, the others are reported and stored as if not made (a normalised
-- live bucket still stored)
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_decide_all(l @extschema@.rl_sql_limit[],
															present boolean[], tat bigint[],
															stored_interval bigint[],
															lock_until bigint[], lock_us bigint[],
															now bigint, costs integer[])
RETURNS @extschema@.rl_sql_verdict[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	n integer := pg_catalog.cardinality(costs);
	v @extschema@.rl_sql_verdict[];
	allowed boolean := true;
	i integer;
BEGIN
	FOR i IN 1 .. n LOOP
		v[i] := @extschema@.rl_sql_decide(l[i], present[i], tat[i], stored_interval[i],
										  lock_until[i], lock_us[i], now, costs[i]);
		IF NOT v[i].allowed AND NOT l[i].shadow THEN
			allowed := false;
		END IF;
	END LOOP;
	IF NOT allowed THEN
		FOR i IN 1 .. n LOOP
			CONTINUE WHEN NOT v[i].allowed OR costs[i] OPERATOR(pg_catalog.=) 0;
			-- not spent: back to the bucket as normalised
			v[i].store := v[i].normalised;
			v[i] := @extschema@.rl_sql_report(v[i], l[i], now,
				v[i].new_tat OPERATOR(pg_catalog.-) (costs[i]::bigint OPERATOR(pg_catalog.*) l[i].interval_us));
		END LOOP;
	END IF;
	RETURN v;
END
$$;

-- gcra_combine: the one answer of several decisions.  The binding request
-- (binding, from 1) is the denied one with the largest retry_after, an
-- unknown one first, else the first with the least remaining; a shadow
-- request's denial denies nothing.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_combine(v @extschema@.rl_sql_verdict[],
														 shadow boolean[],
														 OUT allowed boolean, OUT remaining integer,
														 OUT retry_known boolean,
														 OUT retry_after_us bigint,
														 OUT reset_after_us bigint,
														 OUT binding integer)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	i integer;
BEGIN
	allowed := true;
	retry_known := true;
	retry_after_us := 0;
	remaining := v[1].remaining;
	reset_after_us := v[1].reset_after;
	FOR i IN 1 .. pg_catalog.cardinality(v) LOOP
		remaining := LEAST(remaining, v[i].remaining);
		reset_after_us := GREATEST(reset_after_us, v[i].reset_after);
		IF NOT v[i].allowed AND NOT shadow[i] THEN
			IF allowed
				OR (retry_known AND (NOT v[i].retry_known
									 OR v[i].retry_after OPERATOR(pg_catalog.>) retry_after_us)) THEN
				binding := i;
				retry_known := v[i].retry_known;
				retry_after_us := CASE WHEN v[i].retry_known THEN v[i].retry_after ELSE 0 END;
			END IF;
			allowed := false;
		END IF;
	END LOOP;
	IF allowed THEN
		FOR i IN 1 .. pg_catalog.cardinality(v) LOOP
			IF v[i].remaining OPERATOR(pg_catalog.=) remaining THEN
				binding := i;
				EXIT;
			END IF;
		END LOOP;
	END IF;
END
$$;

-- Raise the error state, message, detail and hint again: called from a
-- statement whose text names the element of rl_take_all's arrays that met
-- it, so that the error's context says "element N of the arrays of ...", as
-- the extension's does, which the clients read.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_raise(state pg_catalog.text, message pg_catalog.text,
													detail pg_catalog.text, hint pg_catalog.text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
BEGIN
	IF detail OPERATOR(pg_catalog.<>) '' AND hint OPERATOR(pg_catalog.<>) '' THEN
		RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail, HINT = hint;
	ELSIF detail OPERATOR(pg_catalog.<>) '' THEN
		RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail;
	ELSIF hint OPERATOR(pg_catalog.<>) '' THEN
		RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, HINT = hint;
	END IF;
	RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message;
END
$$;

-- The body of the four forms of rl_take_all and rl_take_all_detail (rates
-- NULL: by the limiters' policies).  Buckets are locked in the order of
-- their stored keys, so two calls over the same keys never deadlock; a call
-- with nothing to store writes and locks nothing.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_take_all(function pg_catalog.text, by_policy boolean,
														  limiters pg_catalog.text[], keys pg_catalog.text[],
														  rates double precision[],
														  bursts integer[], costs integer[])
RETURNS @extschema@.rl_decision_detail
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
	n integer;
	now bigint;
	l @extschema@.rl_sql_limit[];
	k pg_catalog.bytea[];
	c integer[];
	present boolean[];
	tat bigint[];
	stored_interval bigint[];
	lock_until bigint[];
	lock_us bigint[];
	v @extschema@.rl_sql_verdict[];
	b record;
	must_store boolean := false;
	bucket_table pg_catalog.text;
	i integer;
	j integer;
	d @extschema@.rl_decision_detail;
	shadow boolean[];
	combined record;
	requests @extschema@.rl_decision[];
	element integer;
	state pg_catalog.text;
	message pg_catalog.text;
	detail pg_catalog.text;
	hint pg_catalog.text;
BEGIN
	PERFORM @extschema@.rl_sql_array(limiters, 'limiters', -1);
	n := pg_catalog.cardinality(limiters);
	PERFORM @extschema@.rl_sql_array(keys, 'keys', n);
	IF NOT by_policy THEN
		PERFORM @extschema@.rl_sql_array(rates, 'rates', n);
		PERFORM @extschema@.rl_sql_array(bursts, 'bursts', n);
	END IF;
	IF costs IS NOT NULL THEN
		PERFORM @extschema@.rl_sql_array(costs, 'costs', n);
	END IF;
	-- as deconstructed: subscripts from 1
	keys := ARRAY(SELECT pg_catalog.unnest(keys));
	rates := ARRAY(SELECT pg_catalog.unnest(rates));
	bursts := ARRAY(SELECT pg_catalog.unnest(bursts));
	c := CASE WHEN costs IS NULL THEN pg_catalog.array_fill(1, ARRAY[n])
			  ELSE ARRAY(SELECT pg_catalog.unnest(costs)) END;
	limiters := ARRAY(SELECT pg_catalog.unnest(limiters));

	now := @extschema@.rl_sql_now();
	BEGIN
		FOR i IN 1 .. n LOOP
			element := i;
			IF by_policy THEN
				l[i] := @extschema@.rl_sql_policy(limiters[i], c[i], now);
			ELSE
				PERFORM @extschema@.rl_sql_refuse_explicit(limiters[i], function,
					function OPERATOR(pg_catalog.||) '(limiters, keys, costs)');
				l[i] := @extschema@.rl_sql_limit(rates[i], bursts[i], c[i], now);
				l[i].shadow := false;
				l[i].durable := false;
			END IF;
			shadow[i] := l[i].shadow;
			k[i] := @extschema@.rl_sql_key(limiters[i], keys[i]);
		END LOOP;
	EXCEPTION WHEN OTHERS THEN
		-- nothing was written yet: only the error's context changes
		GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
								detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
		EXECUTE pg_catalog.format('SELECT @extschema@.rl_sql_raise($1, $2, $3, $4)'
								  ' -- element %s of the arrays of %s', element, function)
			USING state, message, detail, hint;
	END;
	-- the same pair twice has the same stored key
	FOR i IN 1 .. n LOOP
		FOR j IN 1 .. i OPERATOR(pg_catalog.-) 1 LOOP
			IF k[i] OPERATOR(pg_catalog.=) k[j] THEN
				RAISE EXCEPTION 'limiters and keys must not name the same pair twice'
					USING ERRCODE = '22023',
						  DETAIL = pg_catalog.format('Elements %s and %s are both ("%s", "%s").',
													 j, i, limiters[i], keys[i]);
			END IF;
		END LOOP;
	END LOOP;

	PERFORM @extschema@.rl_sql_refuse_recovery(function);
	FOR i IN 1 .. n LOOP
		bucket_table := CASE WHEN l[i].durable THEN 'rl_buckets_durable' ELSE 'rl_buckets' END;
		EXECUTE pg_catalog.format('SELECT tat, interval_us, lock_until, lock_us FROM @extschema@.%I'
								  ' WHERE key OPERATOR(pg_catalog.=) $1', bucket_table)
			INTO b USING k[i];
		present[i] := b.interval_us IS NOT NULL;
		tat[i] := @extschema@.rl_sql_us(b.tat);
		stored_interval[i] := b.interval_us;
		lock_until[i] := COALESCE(@extschema@.rl_sql_us(b.lock_until), 0);
		lock_us[i] := COALESCE(b.lock_us, 0);
	END LOOP;
	v := @extschema@.rl_sql_decide_all(l, present, tat, stored_interval, lock_until, lock_us, now, c);
	FOR i IN 1 .. n LOOP
		must_store := must_store OR v[i].store;
	END LOOP;

	IF must_store THEN
		FOR i IN SELECT o.i FROM pg_catalog.generate_series(1, n) AS o(i)
				 WHERE c[o.i] OPERATOR(pg_catalog.>) 0 ORDER BY k[o.i] LOOP
			bucket_table := CASE WHEN l[i].durable THEN 'rl_buckets_durable' ELSE 'rl_buckets' END;
			LOOP
				EXECUTE pg_catalog.format('SELECT tat, interval_us, lock_until, lock_us FROM @extschema@.%I'
										  ' WHERE key OPERATOR(pg_catalog.=) $1 FOR UPDATE', bucket_table)
					INTO b USING k[i];
				EXIT WHEN b.interval_us IS NOT NULL;
				-- a passed bucket (the same as none) to lock; a concurrent
				-- insert of the key wins, and then its row is locked
				EXECUTE pg_catalog.format('INSERT INTO @extschema@.%I (key, tat, interval_us)'
										  ' VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING', bucket_table)
					USING k[i], @extschema@.rl_sql_time(now OPERATOR(pg_catalog.-) 1), l[i].interval_us;
			END LOOP;
			present[i] := true;
			tat[i] := @extschema@.rl_sql_us(b.tat);
			stored_interval[i] := b.interval_us;
			lock_until[i] := COALESCE(@extschema@.rl_sql_us(b.lock_until), 0);
			lock_us[i] := COALESCE(b.lock_us, 0);
		END LOOP;
		-- the clock once the call holds its rows
		now := @extschema@.rl_sql_now();
		v := @extschema@.rl_sql_decide_all(l, present, tat, stored_interval, lock_until, lock_us, now, c);
		FOR i IN 1 .. n LOOP
			CONTINUE WHEN NOT v[i].store;
			bucket_table := CASE WHEN l[i].durable THEN 'rl_buckets_durable' ELSE 'rl_buckets' END;
			EXECUTE pg_catalog.format('UPDATE @extschema@.%I SET tat = $2, interval_us = $3,'
									  ' lock_until = $4, lock_us = $5 WHERE key OPERATOR(pg_catalog.=) $1',
									  bucket_table)
				USING k[i], @extschema@.rl_sql_time(v[i].new_tat), l[i].interval_us,
					  CASE WHEN v[i].new_lock_us OPERATOR(pg_catalog.<>) 0
						   THEN @extschema@.rl_sql_time(v[i].new_lock_until) END,
					  CASE WHEN v[i].new_lock_us OPERATOR(pg_catalog.<>) 0 THEN v[i].new_lock_us END;
		END LOOP;
	END IF;

	SELECT * INTO combined FROM @extschema@.rl_sql_combine(v, shadow);
	d.allowed := combined.allowed;
	d.remaining := combined.remaining;
	d.retry_after := CASE WHEN combined.retry_known
					 THEN combined.retry_after_us::double precision OPERATOR(pg_catalog./) 1000000::double precision END;
	d.reset_after := combined.reset_after_us::double precision OPERATOR(pg_catalog./) 1000000::double precision;
	FOR i IN 1 .. n LOOP
		requests[i] := @extschema@.rl_sql_decision(v[i], shadow[i]);
	END LOOP;
	d.limiter := limiters[combined.binding];
	d.requests := requests;
	RETURN d;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take_all_detail(limiters pg_catalog.text[], keys pg_catalog.text[],
															 costs integer[] DEFAULT NULL)
RETURNS @extschema@.rl_decision_detail
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$ BEGIN RETURN @extschema@.rl_sql_take_all('rl_take_all_detail', true, limiters, keys, NULL, NULL, costs); END $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take_all_detail(limiters pg_catalog.text[], keys pg_catalog.text[],
															 rates double precision[],
															 bursts integer[],
															 costs integer[] DEFAULT NULL)
RETURNS @extschema@.rl_decision_detail
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$ BEGIN RETURN @extschema@.rl_sql_take_all('rl_take_all_detail', false, limiters, keys, rates, bursts, costs); END $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take_all(limiters pg_catalog.text[], keys pg_catalog.text[],
													  costs integer[] DEFAULT NULL)
RETURNS @extschema@.rl_decision_all
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	d @extschema@.rl_decision_detail := @extschema@.rl_sql_take_all('rl_take_all', true, limiters, keys, NULL, NULL, costs);
BEGIN
	RETURN ROW(d.allowed, d.remaining, d.retry_after, d.reset_after, d.limiter)::@extschema@.rl_decision_all;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_take_all(limiters pg_catalog.text[], keys pg_catalog.text[],
													  rates double precision[], bursts integer[],
													  costs integer[] DEFAULT NULL)
RETURNS @extschema@.rl_decision_all
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	d @extschema@.rl_decision_detail := @extschema@.rl_sql_take_all('rl_take_all', false, limiters, keys, rates, bursts, costs);
BEGIN
	RETURN ROW(d.allowed, d.remaining, d.retry_after, d.reset_after, d.limiter)::@extschema@.rl_decision_all;
END
$$;

$script$);

CALL pg_temp.rl_sql_run($script$

-- Buckets -----------------------------------------------------------------

-- the table where limiter decides: rl_buckets_durable for a durable policy
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_bucket_table(limiter pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
	SELECT CASE WHEN COALESCE((SELECT p.durable FROM @extschema@.rl_policies p
							   WHERE p.limiter OPERATOR(pg_catalog.=) rl_sql_bucket_table.limiter), false)
		   THEN 'rl_buckets_durable' ELSE 'rl_buckets' END
$$;

-- Give cost cells back to a live bucket, at the T it was stored with:
-- tat := max(now, tat - cost * T), its lock kept.  True when that changed it.
CREATE OR REPLACE FUNCTION @extschema@.rl_refund(limiter pg_catalog.text, key pg_catalog.text, cost integer DEFAULT 1)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	k pg_catalog.bytea;
	bucket_table pg_catalog.text;
	now bigint;
	b record;
	refunded bigint;
BEGIN
	IF limiter IS NULL OR limiter OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(limiter, 'limiter');
	END IF;
	IF key IS NULL OR key OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(key, 'key');
	END IF;
	IF cost IS NULL THEN
		PERFORM @extschema@.rl_sql_require(cost, 'cost');
	END IF;
	IF cost OPERATOR(pg_catalog.<) 0 THEN
		PERFORM @extschema@.rl_sql_refuse('cost', 0, 0, cost);
	END IF;
	PERFORM @extschema@.rl_sql_refuse_recovery('rl_refund');
	k := @extschema@.rl_sql_key(limiter, key);
	bucket_table := @extschema@.rl_sql_bucket_table(limiter);
	now := @extschema@.rl_sql_now();
	-- a passed or absent bucket is left alone, unlocked
	EXECUTE pg_catalog.format('SELECT tat FROM @extschema@.%I WHERE key OPERATOR(pg_catalog.=) $1',
							  bucket_table) INTO b USING k;
	IF b.tat IS NULL OR @extschema@.rl_sql_us(b.tat) OPERATOR(pg_catalog.<) now THEN
		RETURN false;
	END IF;
	EXECUTE pg_catalog.format('SELECT tat, interval_us FROM @extschema@.%I'
							  ' WHERE key OPERATOR(pg_catalog.=) $1 FOR UPDATE', bucket_table)
		INTO b USING k;
	IF b.tat IS NULL OR @extschema@.rl_sql_us(b.tat) OPERATOR(pg_catalog.<) now THEN
		RETURN false;
	END IF;
	refunded := GREATEST(now::numeric, @extschema@.rl_sql_us(b.tat)
						 OPERATOR(pg_catalog.-) (cost::numeric OPERATOR(pg_catalog.*) b.interval_us))::bigint;
	IF refunded OPERATOR(pg_catalog.=) @extschema@.rl_sql_us(b.tat) THEN
		RETURN false;
	END IF;
	EXECUTE pg_catalog.format('UPDATE @extschema@.%I SET tat = $2 WHERE key OPERATOR(pg_catalog.=) $1',
							  bucket_table) USING k, @extschema@.rl_sql_time(refunded);
	RETURN true;
END
$$;

-- Forget a key, lock included, in both tables: true when a bucket went.
CREATE OR REPLACE FUNCTION @extschema@.rl_reset(limiter pg_catalog.text, key pg_catalog.text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	k pg_catalog.bytea;
	removed boolean;
BEGIN
	IF limiter IS NULL OR limiter OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(limiter, 'limiter');
	END IF;
	IF key IS NULL OR key OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(key, 'key');
	END IF;
	PERFORM @extschema@.rl_sql_refuse_recovery('rl_reset');
	k := @extschema@.rl_sql_key(limiter, key);
	DELETE FROM @extschema@.rl_buckets b WHERE b.key OPERATOR(pg_catalog.=) k;
	removed := FOUND;
	DELETE FROM @extschema@.rl_buckets_durable b WHERE b.key OPERATOR(pg_catalog.=) k;
	RETURN removed OR FOUND;
END
$$;

-- The bucket of one key as stored, where the limiter decides; all NULL
-- when it has none, the lock NULL when it was never locked.
CREATE OR REPLACE FUNCTION @extschema@.rl_inspect(limiter pg_catalog.text, key pg_catalog.text, OUT store pg_catalog.text,
													 OUT tat timestamp with time zone,
													 OUT interval_us bigint,
													 OUT lock_until timestamp with time zone,
													 OUT lock_us bigint)
RETURNS record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	bucket_table pg_catalog.text;
BEGIN
	IF limiter IS NULL OR limiter OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(limiter, 'limiter');
	END IF;
	IF key IS NULL OR key OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(key, 'key');
	END IF;
	PERFORM @extschema@.rl_sql_refuse_recovery('rl_inspect');
	bucket_table := @extschema@.rl_sql_bucket_table(limiter);
	EXECUTE pg_catalog.format('SELECT b.tat, b.interval_us, b.lock_until, b.lock_us FROM @extschema@.%I b'
							  ' WHERE b.key OPERATOR(pg_catalog.=) $1', bucket_table)
		INTO tat, interval_us, lock_until, lock_us
		USING @extschema@.rl_sql_key(limiter, key);
	IF interval_us IS NOT NULL THEN
		store := CASE WHEN bucket_table OPERATOR(pg_catalog.=) 'rl_buckets' THEN 'table' ELSE 'durable' END;
	END IF;
END
$$;

-- Delete the buckets that are the same as absent ones: tat passed, and the
-- time in which a new offence would lengthen the last lockout.  Locked rows
-- are skipped until the next run; answers how many went.
CREATE OR REPLACE FUNCTION @extschema@.rl_cleanup()
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	now timestamp with time zone := pg_catalog.clock_timestamp();
	unlogged bigint;
	logged bigint;
BEGIN
	PERFORM @extschema@.rl_sql_refuse_recovery('rl_cleanup');
	WITH picked AS (
		SELECT b.ctid FROM @extschema@.rl_buckets b
		WHERE b.tat OPERATOR(pg_catalog.<=) now
		  AND (b.lock_until IS NULL
			   OR b.lock_until OPERATOR(pg_catalog.+) (b.lock_us::double precision OPERATOR(pg_catalog.*) interval '1 microsecond')
				  OPERATOR(pg_catalog.<=) now)
		FOR UPDATE SKIP LOCKED)
	DELETE FROM @extschema@.rl_buckets b USING picked
	WHERE b.ctid OPERATOR(pg_catalog.=) picked.ctid
	  AND b.tat OPERATOR(pg_catalog.<=) now;
	GET DIAGNOSTICS unlogged = ROW_COUNT;
	WITH picked AS (
		SELECT b.ctid FROM @extschema@.rl_buckets_durable b
		WHERE b.tat OPERATOR(pg_catalog.<=) now
		  AND (b.lock_until IS NULL
			   OR b.lock_until OPERATOR(pg_catalog.+) (b.lock_us::double precision OPERATOR(pg_catalog.*) interval '1 microsecond')
				  OPERATOR(pg_catalog.<=) now)
		FOR UPDATE SKIP LOCKED)
	DELETE FROM @extschema@.rl_buckets_durable b USING picked
	WHERE b.ctid OPERATOR(pg_catalog.=) picked.ctid
	  AND b.tat OPERATOR(pg_catalog.<=) now;
	GET DIAGNOSTICS logged = ROW_COUNT;
	RETURN unlogged OPERATOR(pg_catalog.+) logged;
END
$$;

-- Which store decides (always the tables here) and how many buckets they hold.
CREATE OR REPLACE FUNCTION @extschema@.rl_store_status(OUT store pg_catalog.text, OUT memory_slots bigint,
														  OUT memory_used bigint,
														  OUT table_buckets bigint)
RETURNS record
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
	SELECT 'table'::pg_catalog.text, NULL::bigint, NULL::bigint,
		   (SELECT pg_catalog.count(*) FROM @extschema@.rl_buckets)
		   OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM @extschema@.rl_buckets_durable)
$$;

-- Counting ----------------------------------------------------------------

-- rl_stats has the C extension's columns; this edition keeps no counts
-- (no shared memory): reading it says so.
CREATE OR REPLACE FUNCTION @extschema@.rl_stats_read(OUT limiter pg_catalog.text, OUT allowed bigint,
														OUT denied bigint, OUT shadow_denied bigint,
														OUT since timestamp with time zone,
														OUT lockouts bigint)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
	RAISE EXCEPTION 'the SQL edition of ratelimit does not count decisions'
		USING ERRCODE = '0A000',
			  DETAIL = 'rl_stats needs the C extension''s shared memory.',
			  HINT = 'Count in the application: the ratelimit clients keep counters of their own.';
END
$$;

CREATE OR REPLACE VIEW @extschema@.rl_stats AS
	SELECT limiter, allowed, denied, shadow_denied, since, lockouts
	FROM @extschema@.rl_stats_read();

CREATE OR REPLACE FUNCTION @extschema@.rl_stats_reset()
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$ SELECT FROM @extschema@.rl_stats_read() $$;

-- The installed version of the SQL edition.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_version()
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '1.3'::pg_catalog.text $$;

$script$);

CALL pg_temp.rl_sql_run($script$

-- The cleanup worker's runs: this edition has no worker (pg_cron or the
-- application's scheduler calls rl_cleanup), so none.
CREATE OR REPLACE FUNCTION @extschema@.rl_cleanup_runs(OUT database pg_catalog.text,
														  OUT started timestamp with time zone,
														  OUT finished timestamp with time zone,
														  OUT deleted bigint)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$ SELECT NULL::pg_catalog.text, NULL::timestamp with time zone, NULL::timestamp with time zone, NULL::bigint WHERE false $$;

-- HTTP --------------------------------------------------------------------

-- A field of d in seconds as microseconds: finite and not negative (the
-- decision's seconds came from whole microseconds: llround back).
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_decision_us(s double precision, field pg_catalog.text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	us double precision;
	whole double precision;
BEGIN
	IF s IS NULL THEN
		RETURN NULL;
	END IF;
	IF s OPERATOR(pg_catalog.=) 'NaN'::double precision OR s OPERATOR(pg_catalog.<) 0::double precision
		OR s OPERATOR(pg_catalog.>) 9223372036854::double precision THEN
		RAISE EXCEPTION 'd.% must be a number of seconds, not %', field, s USING ERRCODE = '22023';
	END IF;
	us := s OPERATOR(pg_catalog.*) 1000000::double precision;
	whole := pg_catalog.trunc(us);
	IF us OPERATOR(pg_catalog.-) whole OPERATOR(pg_catalog.>=) 0.5::double precision THEN
		whole := whole OPERATOR(pg_catalog.+) 1::double precision;
	END IF;
	RETURN whole::bigint;
END
$$;

-- The IETF RateLimit fields and Retry-After of decision d of limiter under
-- (rate, burst), as a JSON object (http.c's headers_json).
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_headers(d @extschema@.rl_decision, limiter pg_catalog.text,
														 rate double precision, burst integer)
RETURNS pg_catalog.jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
	name pg_catalog.text := '"';
	bytes pg_catalog.bytea;
	byte integer;
	i integer;
	l @extschema@.rl_sql_limit;
	reset_us bigint;
	retry_us bigint;
	back_us bigint;
	next_cell_s bigint := 0;
	ratelimit pg_catalog.text;
	fields pg_catalog.jsonb;
BEGIN
	IF d IS NULL THEN
		RAISE EXCEPTION 'd must not be null' USING ERRCODE = '22004';
	END IF;
	IF d.allowed IS NULL THEN
		RAISE EXCEPTION 'd.allowed must not be null' USING ERRCODE = '22004';
	END IF;
	IF d.remaining IS NULL THEN
		RAISE EXCEPTION 'd.remaining must not be null' USING ERRCODE = '22004';
	END IF;
	reset_us := @extschema@.rl_sql_decision_us(d.reset_after, 'reset_after');
	IF reset_us IS NULL THEN
		RAISE EXCEPTION 'd.reset_after must not be null' USING ERRCODE = '22004';
	END IF;
	-- NULL: a denial that can never be allowed (cost > burst)
	retry_us := @extschema@.rl_sql_decision_us(d.retry_after, 'retry_after');
	IF limiter IS NULL OR limiter OPERATOR(pg_catalog.=) '' THEN
		PERFORM @extschema@.rl_sql_require_text(limiter, 'limiter');
	END IF;
	-- the limiter as an sf-string: printable ASCII, " and \ escaped
	bytes := pg_catalog.convert_to(limiter, pg_catalog.getdatabaseencoding());
	FOR i IN 0 .. pg_catalog.length(bytes) OPERATOR(pg_catalog.-) 1 LOOP
		byte := pg_catalog.get_byte(bytes, i);
		IF byte OPERATOR(pg_catalog.<) 32 OR byte OPERATOR(pg_catalog.>) 126 THEN
			RAISE EXCEPTION 'limiter must be printable ASCII to name an HTTP rate limit'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('Byte %s of limiter is 0x%s.', i OPERATOR(pg_catalog.+) 1,
												 pg_catalog.lpad(pg_catalog.to_hex(byte), 2, '0')),
					  HINT = 'Use a name of the characters 0x20 to 0x7E.';
		END IF;
		IF byte OPERATOR(pg_catalog.=) 34 OR byte OPERATOR(pg_catalog.=) 92 THEN
			name := name OPERATOR(pg_catalog.||) '\';
		END IF;
		name := name OPERATOR(pg_catalog.||) pg_catalog.chr(byte);
	END LOOP;
	name := name OPERATOR(pg_catalog.||) '"';
	IF rate IS NULL THEN
		PERFORM @extschema@.rl_sql_require(rate, 'rate');
	END IF;
	IF burst IS NULL THEN
		PERFORM @extschema@.rl_sql_require(burst, 'burst');
	END IF;
	l := @extschema@.rl_sql_limit(rate, burst, 0, @extschema@.rl_sql_now());
	IF d.remaining OPERATOR(pg_catalog.<) 0 OR d.remaining OPERATOR(pg_catalog.>) burst THEN
		RAISE EXCEPTION 'd.remaining must be between 0 and burst, not %', d.remaining
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('burst is %s.', burst),
				  HINT = 'Pass the limit the decision was made with.';
	END IF;
	-- seconds until the next cell is back: the debt modulo T, or T when the
	-- debt is a whole number of cells (1 to T microseconds), rounded up
	ratelimit := pg_catalog.format('%s;r=%s', name, d.remaining);
	IF reset_us OPERATOR(pg_catalog.>) 0 THEN
		back_us := reset_us OPERATOR(pg_catalog.%) l.interval_us;
		IF back_us OPERATOR(pg_catalog.=) 0 THEN
			back_us := l.interval_us;
		END IF;
		next_cell_s := back_us OPERATOR(pg_catalog./) 1000000
			OPERATOR(pg_catalog.+) CASE WHEN back_us OPERATOR(pg_catalog.%) 1000000 OPERATOR(pg_catalog.<>) 0
								   THEN 1 ELSE 0 END;
		ratelimit := pg_catalog.format('%s;t=%s', ratelimit, next_cell_s);
	END IF;
	-- the window in which burst requests fit: w = max(1, ceil(burst / rate))
	fields := pg_catalog.jsonb_build_object(
		'RateLimit-Policy', pg_catalog.format('%s;q=%s;w=%s', name, burst,
			GREATEST(1::double precision,
					 pg_catalog.ceil(burst::double precision OPERATOR(pg_catalog./) rate))::bigint),
		'RateLimit', ratelimit);
	-- a denial that can be retried: Retry-After, never earlier than t
	IF NOT d.allowed AND retry_us IS NOT NULL THEN
		fields := fields OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('Retry-After',
			GREATEST(retry_us OPERATOR(pg_catalog./) 1000000
					 OPERATOR(pg_catalog.+) CASE WHEN retry_us OPERATOR(pg_catalog.%) 1000000 OPERATOR(pg_catalog.<>) 0
											THEN 1 ELSE 0 END,
					 next_cell_s)::pg_catalog.text);
	END IF;
	RETURN fields;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_headers(d @extschema@.rl_decision, limiter pg_catalog.text,
													 rate double precision, burst integer)
RETURNS pg_catalog.jsonb
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
AS $$ SELECT @extschema@.rl_sql_headers(d, limiter, rate, burst) $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_headers(d @extschema@.rl_decision, limiter pg_catalog.text)
RETURNS pg_catalog.jsonb
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	l @extschema@.rl_sql_limit;
BEGIN
	-- a bad decision or name is refused before the policy is looked up
	PERFORM @extschema@.rl_sql_headers(d, limiter, 1, GREATEST(d.remaining, 1));
	l := @extschema@.rl_sql_policy(limiter, 0, @extschema@.rl_sql_now());
	RETURN @extschema@.rl_sql_headers(d, limiter, l.rate, l.burst);
END
$$;

-- PostgREST: take by the limiter's policy; a denial is the HTTP 429 that
-- PostgREST builds from SQLSTATE PGRST: the message is the response body,
-- the detail its status and headers.
CREATE OR REPLACE FUNCTION @extschema@.rl_guard(limiter pg_catalog.text, key pg_catalog.text, cost integer DEFAULT 1)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $$
DECLARE
	d @extschema@.rl_decision := @extschema@.rl_sql_take_policy('rl_guard', limiter, key, cost, NULL, false);
	headers pg_catalog.jsonb;
BEGIN
	IF d.allowed THEN
		RETURN;
	END IF;
	headers := @extschema@.rl_headers(d, limiter);
	RAISE SQLSTATE 'PGRST' USING
		MESSAGE = pg_catalog.json_build_object(
			'code', 'RL429',
			'message', 'Too Many Requests',
			'details', pg_catalog.format('The rate limit %s is exhausted.', limiter),
			'hint', CASE WHEN headers OPERATOR(pg_catalog.?) 'Retry-After'
					THEN pg_catalog.format('Retry in %s seconds.', headers OPERATOR(pg_catalog.->>) 'Retry-After')
					ELSE 'This request costs more than the limit ever allows.' END)::pg_catalog.text,
		DETAIL = pg_catalog.json_build_object('status', 429, 'headers', headers)::pg_catalog.text;
END
$$;

$script$);

CALL pg_temp.rl_sql_run($script$

-- Client addresses (src/forwarded_parse.c) --------------------------------

-- IPv4-mapped IPv6 (::ffff:a.b.c.d) as IPv4, judged by its bits; any
-- netmask dropped
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_unmap(ip pg_catalog.inet)
RETURNS pg_catalog.inet
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT CASE WHEN pg_catalog.host(ip)::pg_catalog.inet OPERATOR(pg_catalog.<<=) '::ffff:0:0/96'::pg_catalog.inet
		   THEN '0.0.0.0'::pg_catalog.inet OPERATOR(pg_catalog.+)
				(pg_catalog.host(ip)::pg_catalog.inet OPERATOR(pg_catalog.-) '::ffff:0.0.0.0'::pg_catalog.inet)
		   ELSE pg_catalog.host(ip)::pg_catalog.inet END
$$;

-- One node of a header as an address, or NULL when malformed: IPv4 as four
-- decimal octets without leading zeros with an optional ":port"; "[IPv6]"
-- with an optional ":port"; bare IPv6 (no port) where bare_ipv6 allows it.
-- IPv6 is RFC 4291 text with at most one "::", optionally ending in dotted
-- IPv4, with an optional "%zone" of unreserved characters, which is dropped.
-- The unspecified addresses are malformed.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_node(node pg_catalog.text, bare_ipv6 boolean)
RETURNS pg_catalog.inet
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	ipv4 constant pg_catalog.text := '(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}';
	port constant pg_catalog.text := '([1-9][0-9]{0,4})';
	h16 constant pg_catalog.text := '[0-9A-Fa-f]{1,4}';
	address pg_catalog.text;
	port_text pg_catalog.text;
	parts pg_catalog.text[];
	groups integer;
	ip pg_catalog.inet;
BEGIN
	IF node OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(node) OPERATOR(pg_catalog.>) 64 THEN
		RETURN NULL;
	END IF;
	IF pg_catalog.left(node, 1) OPERATOR(pg_catalog.=) '[' THEN
		parts := pg_catalog.regexp_match(node, '^\[([^]]*)\](:(.*))?$');
		IF parts IS NULL THEN
			RETURN NULL;
		END IF;
		address := parts[1];
		port_text := parts[3];
		IF parts[2] IS NOT NULL AND port_text IS NULL THEN
			RETURN NULL;
		END IF;
	ELSIF node OPERATOR(pg_catalog.~) ('^' OPERATOR(pg_catalog.||) ipv4 OPERATOR(pg_catalog.||) '(:|$)') THEN
		parts := pg_catalog.regexp_match(node, '^([^:]*)(:(.*))?$');
		IF parts[2] IS NOT NULL AND NOT parts[3] OPERATOR(pg_catalog.~) ('^' OPERATOR(pg_catalog.||) port OPERATOR(pg_catalog.||) '$') THEN
			RETURN NULL;
		END IF;
		IF parts[2] IS NOT NULL AND parts[3]::integer OPERATOR(pg_catalog.>) 65535 THEN
			RETURN NULL;
		END IF;
		ip := parts[1]::pg_catalog.inet;
		RETURN CASE WHEN ip OPERATOR(pg_catalog.<>) '0.0.0.0'::pg_catalog.inet THEN ip END;
	ELSIF bare_ipv6 THEN
		address := node;
	ELSE
		RETURN NULL;
	END IF;
	IF port_text IS NOT NULL AND (NOT port_text OPERATOR(pg_catalog.~) ('^' OPERATOR(pg_catalog.||) port OPERATOR(pg_catalog.||) '$')
								  OR port_text::integer OPERATOR(pg_catalog.>) 65535) THEN
		RETURN NULL;
	END IF;
	-- the zone
	IF pg_catalog.strpos(address, '%') OPERATOR(pg_catalog.>) 0 THEN
		IF NOT pg_catalog.substr(address, pg_catalog.strpos(address, '%') OPERATOR(pg_catalog.+) 1)
			OPERATOR(pg_catalog.~) '^[A-Za-z0-9._~-]+$' THEN
			RETURN NULL;
		END IF;
		address := pg_catalog.left(address, pg_catalog.strpos(address, '%') OPERATOR(pg_catalog.-) 1);
	END IF;
	-- eight groups, or fewer around one "::"; a dotted IPv4 ends it as two
	parts := pg_catalog.regexp_match(address, '^(.*?)::(.*)$');
	IF parts IS NULL THEN
		IF NOT address OPERATOR(pg_catalog.~) ('^(' OPERATOR(pg_catalog.||) h16 OPERATOR(pg_catalog.||) ':){6}(' OPERATOR(pg_catalog.||) h16
				OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) h16 OPERATOR(pg_catalog.||) '|' OPERATOR(pg_catalog.||) ipv4 OPERATOR(pg_catalog.||) ')$') THEN
			RETURN NULL;
		END IF;
	ELSE
		IF NOT parts[1] OPERATOR(pg_catalog.~) ('^(' OPERATOR(pg_catalog.||) h16 OPERATOR(pg_catalog.||) '(:' OPERATOR(pg_catalog.||) h16 OPERATOR(pg_catalog.||) ')*)?$')
			OR NOT parts[2] OPERATOR(pg_catalog.~) ('^((' OPERATOR(pg_catalog.||) h16 OPERATOR(pg_catalog.||) ':)*(' OPERATOR(pg_catalog.||) h16
				OPERATOR(pg_catalog.||) '|' OPERATOR(pg_catalog.||) ipv4 OPERATOR(pg_catalog.||) '))?$') THEN
			RETURN NULL;
		END IF;
		groups := pg_catalog.array_length(pg_catalog.regexp_split_to_array(parts[1], ':'), 1)
			OPERATOR(pg_catalog.+) pg_catalog.array_length(pg_catalog.regexp_split_to_array(parts[2], ':'), 1)
			OPERATOR(pg_catalog.+) CASE WHEN parts[2] OPERATOR(pg_catalog.~) '\.' THEN 1 ELSE 0 END
			OPERATOR(pg_catalog.-) CASE WHEN parts[1] OPERATOR(pg_catalog.=) '' THEN 1 ELSE 0 END
			OPERATOR(pg_catalog.-) CASE WHEN parts[2] OPERATOR(pg_catalog.=) '' THEN 1 ELSE 0 END;
		IF groups OPERATOR(pg_catalog.>) 7 THEN
			RETURN NULL;
		END IF;
	END IF;
	ip := @extschema@.rl_sql_unmap(address::pg_catalog.inet);
	RETURN CASE WHEN ip OPERATOR(pg_catalog.<>) '::'::pg_catalog.inet AND ip OPERATOR(pg_catalog.<>) '0.0.0.0'::pg_catalog.inet
		   THEN ip END;
END
$$;

-- trusted as normalised ranges: a range inside ::ffff:0:0/96 with a prefix
-- of 96 or more is the IPv4 range it maps; refused: a NULL element, /0 in
-- either family, and an IPv6 range that covers all of ::ffff:0:0/96
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_trusted(trusted pg_catalog.cidr[])
RETURNS pg_catalog.inet[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	range pg_catalog.cidr;
	ranges pg_catalog.inet[] := '{}';
	why pg_catalog.text;
BEGIN
	IF trusted IS NULL THEN
		RETURN ranges;
	END IF;
	FOREACH range IN ARRAY trusted LOOP
		IF range IS NULL THEN
			RAISE EXCEPTION 'trusted must not contain NULL' USING ERRCODE = '22023';
		END IF;
		why := CASE
			WHEN pg_catalog.masklen(range) OPERATOR(pg_catalog.=) 0
			THEN 'has a prefix length of 0, which would trust every address'
			WHEN pg_catalog.family(range) OPERATOR(pg_catalog.=) 6 AND pg_catalog.masklen(range) OPERATOR(pg_catalog.<=) 96
				 AND '::ffff:0:0/96'::pg_catalog.cidr OPERATOR(pg_catalog.<<=) range
			THEN 'covers all of ::ffff:0:0/96, which would trust every IPv4 address' END;
		IF why IS NOT NULL THEN
			RAISE EXCEPTION 'trusted must not contain %', range USING ERRCODE = '22023',
				DETAIL = pg_catalog.format('%s %s.', range, why),
				HINT = 'Name only your own proxies.';
		END IF;
		IF pg_catalog.family(range) OPERATOR(pg_catalog.=) 6 AND range OPERATOR(pg_catalog.<<=) '::ffff:0:0/96'::pg_catalog.cidr THEN
			ranges := ranges OPERATOR(pg_catalog.||) pg_catalog.set_masklen(@extschema@.rl_sql_unmap(range),
				pg_catalog.masklen(range) OPERATOR(pg_catalog.-) 96);
		ELSE
			ranges := ranges OPERATOR(pg_catalog.||) range::pg_catalog.inet;
		END IF;
	END LOOP;
	RETURN ranges;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_sql_is_trusted(ip pg_catalog.inet, ranges pg_catalog.inet[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT EXISTS (SELECT FROM pg_catalog.unnest(ranges) AS r(range)
				   WHERE pg_catalog.family(r.range) OPERATOR(pg_catalog.=) pg_catalog.family(ip)
					 AND ip OPERATOR(pg_catalog.<<=) r.range)
$$;

-- The next node of header from the right, before byte unread (0-based, as
-- a length): step 'end', 'node' or 'malformed'; after anything but a node
-- nothing more is read.  X-Forwarded-For: comma-separated entries, trimmed
-- of spaces and tabs, empty ones skipped.  Forwarded (RFC 7239): elements
-- of name=value pairs (a token or a quoted-string) separated by ";",
-- elements by ","; spaces and tabs around those, not around "="; an element
-- with not exactly one for=, or any syntax error, is malformed.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_next_node(forwarded boolean, header pg_catalog.bytea,
														   INOUT unread integer,
														   OUT step pg_catalog.text, OUT node pg_catalog.inet)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	pos integer := unread;
	stop integer;
	start integer;
	c integer;
	value_start integer;
	value_end integer;
	name_end integer;
	quoted boolean;
	empty boolean;
	have_for boolean;
	for_quoted boolean;
	for_start integer;
	for_end integer;
	slashes integer;
	closing boolean;
	text_of_node pg_catalog.text;
BEGIN
	step := 'malformed';
	unread := 0;
	LOOP
		-- white space left of pos
		WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) ANY ('{32,9}') LOOP
			pos := pos OPERATOR(pg_catalog.-) 1;
		END LOOP;
		IF pos OPERATOR(pg_catalog.=) 0 THEN
			step := 'end';
			RETURN;
		END IF;
		IF NOT forwarded THEN
			IF pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) 44 THEN
				pos := pos OPERATOR(pg_catalog.-) 1;
				CONTINUE;
			END IF;
			stop := pos;
			start := pos;
			WHILE start OPERATOR(pg_catalog.>) 0
				  AND NOT pg_catalog.get_byte(header, start OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) ANY ('{44,32,9}') LOOP
				IF stop OPERATOR(pg_catalog.-) start OPERATOR(pg_catalog.=) 64 THEN
					RETURN;
				END IF;
				start := start OPERATOR(pg_catalog.-) 1;
			END LOOP;
			-- white space left of the entry must reach a comma or the start
			pos := start;
			WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) ANY ('{32,9}') LOOP
				pos := pos OPERATOR(pg_catalog.-) 1;
			END LOOP;
			IF pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 44 THEN
				RETURN;
			END IF;
			for_start := start;
			for_end := stop;
			unread := GREATEST(pos OPERATOR(pg_catalog.-) 1, 0);
			EXIT;
		END IF;

		empty := true;
		have_for := false;
		for_quoted := false;
		-- the pairs of this element, from the right
		WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 44 LOOP
			empty := false;
			IF pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 59 THEN
				value_end := pos;
				quoted := pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) 34;
				IF quoted THEN
					-- the opening quote: one preceded by an even number of
					-- backslashes; control characters are never allowed
					pos := pos OPERATOR(pg_catalog.-) 1;
					closing := true;
					LOOP
						c := pg_catalog.get_byte(header, pos);
						IF c OPERATOR(pg_catalog.=) 34 THEN
							slashes := 0;
							WHILE slashes OPERATOR(pg_catalog.<) pos
								  AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1 OPERATOR(pg_catalog.-) slashes) OPERATOR(pg_catalog.=) 92 LOOP
								slashes := slashes OPERATOR(pg_catalog.+) 1;
							END LOOP;
							IF slashes OPERATOR(pg_catalog.%) 2 OPERATOR(pg_catalog.=) 0 THEN
								EXIT WHEN NOT closing;
							ELSIF closing THEN
								RETURN;
							END IF;
							closing := false;
						ELSIF (c OPERATOR(pg_catalog.<) 32 AND c OPERATOR(pg_catalog.<>) 9) OR c OPERATOR(pg_catalog.=) 127 THEN
							RETURN;
						END IF;
						IF pos OPERATOR(pg_catalog.=) 0 THEN
							RETURN;
						END IF;
						pos := pos OPERATOR(pg_catalog.-) 1;
					END LOOP;
					value_start := pos OPERATOR(pg_catalog.+) 1;
					value_end := value_end OPERATOR(pg_catalog.-) 1;
				ELSE
					WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.chr(pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1))
						  OPERATOR(pg_catalog.~) '^[A-Za-z0-9!#$%&''*+.^_`|~-]$' LOOP
						pos := pos OPERATOR(pg_catalog.-) 1;
					END LOOP;
					value_start := pos;
					IF value_start OPERATOR(pg_catalog.=) value_end THEN
						RETURN;
					END IF;
				END IF;
				IF pos OPERATOR(pg_catalog.=) 0 OR pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 61 THEN
					RETURN;
				END IF;
				pos := pos OPERATOR(pg_catalog.-) 1;
				name_end := pos;
				WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.chr(pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1))
					  OPERATOR(pg_catalog.~) '^[A-Za-z0-9!#$%&''*+.^_`|~-]$' LOOP
					pos := pos OPERATOR(pg_catalog.-) 1;
				END LOOP;
				IF pos OPERATOR(pg_catalog.=) name_end THEN
					RETURN;
				END IF;
				IF pg_catalog.lower(pg_catalog.encode(pg_catalog.substr(header, pos OPERATOR(pg_catalog.+) 1, name_end OPERATOR(pg_catalog.-) pos), 'escape'))
					OPERATOR(pg_catalog.=) 'for' THEN
					-- RFC 7239: a parameter occurs at most once per element
					IF have_for THEN
						RETURN;
					END IF;
					have_for := true;
					for_quoted := quoted;
					for_start := value_start;
					for_end := value_end;
				END IF;
				WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) ANY ('{32,9}') LOOP
					pos := pos OPERATOR(pg_catalog.-) 1;
				END LOOP;
				EXIT WHEN pos OPERATOR(pg_catalog.=) 0 OR pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) 44;
				IF pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<>) 59 THEN
					RETURN;
				END IF;
			END IF;
			-- past the ';'
			pos := pos OPERATOR(pg_catalog.-) 1;
			WHILE pos OPERATOR(pg_catalog.>) 0 AND pg_catalog.get_byte(header, pos OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.=) ANY ('{32,9}') LOOP
				pos := pos OPERATOR(pg_catalog.-) 1;
			END LOOP;
		END LOOP;
		-- past the ','
		IF pos OPERATOR(pg_catalog.>) 0 THEN
			pos := pos OPERATOR(pg_catalog.-) 1;
		END IF;
		CONTINUE WHEN empty;
		IF NOT have_for THEN
			RETURN;
		END IF;
		unread := pos;
		EXIT;
	END LOOP;
	text_of_node := pg_catalog.encode(pg_catalog.substr(header, for_start OPERATOR(pg_catalog.+) 1, for_end OPERATOR(pg_catalog.-) for_start), 'escape');
	-- a node is ASCII; quoted-pairs never belong in one
	IF text_of_node OPERATOR(pg_catalog.~) '[^\x21-\x7e]' OR (for_quoted AND pg_catalog.strpos(text_of_node, '\') OPERATOR(pg_catalog.>) 0) THEN
		unread := 0;
		RETURN;
	END IF;
	node := @extschema@.rl_sql_node(text_of_node, NOT forwarded);
	IF node IS NULL THEN
		unread := 0;
	ELSE
		step := 'node';
	END IF;
END
$$;

-- The address the nearest trusted proxy saw, walking header from the right
-- from remote: at most 64 trusted entries, the peer not counted.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_client_addr(forwarded boolean, remote pg_catalog.inet,
															 header pg_catalog.bytea, unread integer,
															 ranges pg_catalog.inet[])
RETURNS pg_catalog.inet
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
	cur pg_catalog.inet := @extschema@.rl_sql_unmap(remote);
	next record;
	hops integer;
BEGIN
	IF NOT @extschema@.rl_sql_is_trusted(cur, ranges) THEN
		RETURN cur;
	END IF;
	FOR hops IN 1 .. 64 LOOP
		next := @extschema@.rl_sql_next_node(forwarded, header, unread);
		IF next.step OPERATOR(pg_catalog.<>) 'node' THEN
			RETURN cur;
		END IF;
		IF NOT @extschema@.rl_sql_is_trusted(next.node, ranges) THEN
			RETURN next.node;
		END IF;
		cur := next.node;
		unread := next.unread;
	END LOOP;
	RETURN cur;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_sql_header_bytes(header pg_catalog.text)
RETURNS pg_catalog.bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT COALESCE(pg_catalog.convert_to(header, pg_catalog.getdatabaseencoding()), '\x'::pg_catalog.bytea) $$;

CREATE OR REPLACE FUNCTION @extschema@.rl_client_ip(remote pg_catalog.inet, xff pg_catalog.text, trusted pg_catalog.cidr[])
RETURNS pg_catalog.inet
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
AS $$
DECLARE
	ranges pg_catalog.inet[] := @extschema@.rl_sql_trusted(trusted);
	header pg_catalog.bytea;
BEGIN
	IF remote IS NULL THEN
		RETURN NULL;
	END IF;
	header := @extschema@.rl_sql_header_bytes(xff);
	RETURN @extschema@.rl_sql_client_addr(false, remote, header, pg_catalog.length(header), ranges);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.rl_client_ip_forwarded(remote pg_catalog.inet, forwarded pg_catalog.text,
																 trusted pg_catalog.cidr[])
RETURNS pg_catalog.inet
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
AS $$
DECLARE
	ranges pg_catalog.inet[] := @extschema@.rl_sql_trusted(trusted);
	header pg_catalog.bytea;
BEGIN
	IF remote IS NULL THEN
		RETURN NULL;
	END IF;
	header := @extschema@.rl_sql_header_bytes(forwarded);
	RETURN @extschema@.rl_sql_client_addr(true, remote, header, pg_catalog.length(header), ranges);
END
$$;

-- a comma-separated list of addresses and CIDR ranges
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_trusted_list(list pg_catalog.text)
RETURNS pg_catalog.cidr[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	SELECT pg_catalog.array_agg(pg_catalog.btrim(e.entry, E' \t')::pg_catalog.cidr)
	FROM pg_catalog.regexp_split_to_table(list, ',') AS e(entry)
$$;

-- the trusted proxies of rl_settings' trusted_proxies row
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_trusted_proxies()
RETURNS pg_catalog.cidr[]
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
	SELECT @extschema@.rl_sql_trusted_list(s.value) FROM @extschema@.rl_settings s
	WHERE s.name OPERATOR(pg_catalog.=) 'trusted_proxies'
$$;

-- A trusted_proxies row is checked when it is written, as the extension
-- checks its setting: each entry an address or CIDR range, none that would
-- trust every client.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_settings_check()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
	entry pg_catalog.text;
BEGIN
	IF NEW.name OPERATOR(pg_catalog.<>) 'trusted_proxies' THEN
		RETURN NEW;
	END IF;
	FOREACH entry IN ARRAY pg_catalog.regexp_split_to_array(NEW.value, ',') LOOP
		entry := pg_catalog.btrim(entry, E' \t');
		BEGIN
			IF entry OPERATOR(pg_catalog.=) '' THEN
				RAISE EXCEPTION 'an empty entry';
			END IF;
			PERFORM entry::pg_catalog.cidr;
		EXCEPTION WHEN OTHERS THEN
			RAISE EXCEPTION 'trusted_proxies must be a comma-separated list of addresses and CIDR ranges'
				USING ERRCODE = '22023',
					  DETAIL = CASE WHEN entry OPERATOR(pg_catalog.=) '' THEN 'It has an empty entry.'
							   ELSE pg_catalog.format('"%s" is not an IPv4 or IPv6 address with an optional /prefix length, or has bits set to the right of it.', entry) END,
					  HINT = 'Give the addresses or CIDR ranges of your own proxies.';
		END;
	END LOOP;
	PERFORM @extschema@.rl_sql_trusted(@extschema@.rl_sql_trusted_list(NEW.value));
	RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER rl_settings_check
	BEFORE INSERT OR UPDATE ON @extschema@.rl_settings
	FOR EACH ROW EXECUTE FUNCTION @extschema@.rl_sql_settings_check();

CREATE OR REPLACE FUNCTION @extschema@.rl_client_ip(remote pg_catalog.inet, xff pg_catalog.text)
RETURNS pg_catalog.inet
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
AS $$ SELECT @extschema@.rl_client_ip(remote, xff, @extschema@.rl_sql_trusted_proxies()) $$;

-- PostgREST: the client of the request in progress, from header in
-- request.headers; its rightmost entry, written by the proxy in front of
-- PostgREST, plays the peer's part.  No such header, or no valid rightmost
-- entry: NULL.
CREATE OR REPLACE FUNCTION @extschema@.rl_request_ip(trusted pg_catalog.cidr[] DEFAULT NULL,
														header pg_catalog.text DEFAULT 'x-forwarded-for')
RETURNS pg_catalog.inet
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER
AS $$
DECLARE
	ranges pg_catalog.inet[] := @extschema@.rl_sql_trusted(trusted);
	headers pg_catalog.text;
	value pg_catalog.bytea;
	proxy_saw record;
BEGIN
	PERFORM @extschema@.rl_sql_require_text(header, 'header');
	headers := pg_catalog.current_setting('request.headers', true);
	IF headers IS NULL OR headers::pg_catalog.text OPERATOR(pg_catalog.=) ''
		OR pg_catalog.jsonb_typeof(headers::pg_catalog.jsonb) OPERATOR(pg_catalog.<>) 'object'
		OR COALESCE(pg_catalog.jsonb_typeof(headers::pg_catalog.jsonb OPERATOR(pg_catalog.->) pg_catalog.lower(header)), '')
		   OPERATOR(pg_catalog.<>) 'string' THEN
		RETURN NULL;
	END IF;
	value := @extschema@.rl_sql_header_bytes(headers::pg_catalog.jsonb OPERATOR(pg_catalog.->>) pg_catalog.lower(header));
	proxy_saw := @extschema@.rl_sql_next_node(false, value, pg_catalog.length(value));
	IF proxy_saw.step OPERATOR(pg_catalog.<>) 'node' THEN
		RETURN NULL;
	END IF;
	RETURN @extschema@.rl_sql_client_addr(false, proxy_saw.node, value, proxy_saw.unread, ranges);
END
$$;

-- IPv4 (and IPv4-mapped) as its dotted address; IPv6 masked to its first
-- ipv6_prefix bits, written with the prefix length
CREATE OR REPLACE FUNCTION @extschema@.rl_ip_key(ip pg_catalog.inet, ipv6_prefix integer DEFAULT 64)
RETURNS pg_catalog.text
LANGUAGE plpgsql STRICT IMMUTABLE PARALLEL SAFE SECURITY DEFINER
AS $$
DECLARE
	host pg_catalog.inet := @extschema@.rl_sql_unmap(ip);
	low bigint;
BEGIN
	IF ipv6_prefix OPERATOR(pg_catalog.<) 1 OR ipv6_prefix OPERATOR(pg_catalog.>) 128 THEN
		RAISE EXCEPTION 'ipv6_prefix must be between 1 and 128, not %', ipv6_prefix
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.family(host) OPERATOR(pg_catalog.=) 4 THEN
		RETURN pg_catalog.host(host);
	END IF;
	host := pg_catalog.network(pg_catalog.set_masklen(host, ipv6_prefix));
	-- RFC 5952 text: PostgreSQL writes ::/96 addresses as ::a.b.c.d
	IF pg_catalog.strpos(pg_catalog.host(host), '.') OPERATOR(pg_catalog.>) 0 THEN
		low := host OPERATOR(pg_catalog.-) '::'::pg_catalog.inet;
		RETURN '::' OPERATOR(pg_catalog.||)
			CASE WHEN low OPERATOR(pg_catalog.>=) 65536
				 THEN pg_catalog.to_hex(low OPERATOR(pg_catalog./) 65536) OPERATOR(pg_catalog.||) ':' ELSE '' END
			OPERATOR(pg_catalog.||) pg_catalog.to_hex(low OPERATOR(pg_catalog.%) 65536)
			OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) ipv6_prefix;
	END IF;
	RETURN pg_catalog.host(host) OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) ipv6_prefix;
END
$$;

$script$);

CALL pg_temp.rl_sql_run($script$

-- Privileges --------------------------------------------------------------

-- Every object of the edition in this schema, as a kind and a qualified
-- name that GRANT, REVOKE and DROP take: the install sets their privileges
-- from it, the uninstall drops them by it.
CREATE OR REPLACE FUNCTION @extschema@.rl_sql_objects(OUT kind pg_catalog.text,
													   OUT identity pg_catalog.text)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
	SELECT 'FUNCTION', pg_catalog.format('%I.%I(%s)', n.nspname, p.proname,
										 pg_catalog.oidvectortypes(p.proargtypes))
	FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
	WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
	  AND (p.proname OPERATOR(pg_catalog.~) '^rl_sql_'
		   OR p.proname OPERATOR(pg_catalog.=) ANY ('{rl_cleanup,rl_cleanup_runs,rl_client_ip,
				rl_client_ip_forwarded,rl_guard,rl_headers,rl_inspect,rl_ip_key,rl_refund,
				rl_request_ip,rl_reset,rl_stats_read,rl_stats_reset,rl_store_status,rl_take,
				rl_take_all,rl_take_all_detail,rl_take_at}'::pg_catalog.name[]))
	UNION ALL
	SELECT CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'v' THEN 'VIEW' ELSE 'TABLE' END,
		   pg_catalog.format('%I.%I', n.nspname, c.relname)
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
	WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
	  AND c.relname OPERATOR(pg_catalog.=) ANY ('{rl_buckets,rl_buckets_durable,rl_policies,rl_settings,
												 rl_stats}'::pg_catalog.name[])
	UNION ALL
	SELECT 'TYPE', pg_catalog.format('%I.%I', n.nspname, t.typname)
	FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
	WHERE t.typnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
	  AND t.typname OPERATOR(pg_catalog.=) ANY ('{rl_decision,rl_decision_all,rl_decision_detail,
												rl_sql_verdict,rl_sql_limit}'::pg_catalog.name[])
$$;

-- Explicit, whatever ALTER DEFAULT PRIVILEGES says: any role decides, reads
-- the policies and finds its client's address; the functions that forge
-- time, wipe or give back budgets, tell a key's use or do maintenance are
-- for the roles they are granted to; only the owner touches the tables and
-- the functions behind the public ones.  A first install revokes what
-- default privileges granted anyone; an install over an installation keeps
-- the grants an administrator gave since.
DO $privileges$
DECLARE
	object record;
BEGIN
	FOR object IN SELECT * FROM @extschema@.rl_sql_objects() WHERE kind OPERATOR(pg_catalog.<>) 'TYPE' LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC',
								  CASE WHEN object.kind OPERATOR(pg_catalog.=) 'FUNCTION' THEN 'FUNCTION' ELSE 'TABLE' END,
								  object.identity);
	END LOOP;
	IF NOT (SELECT fresh FROM pg_temp.rl_sql_install) THEN
		RETURN;
	END IF;
	FOR object IN
		SELECT o.kind, o.identity, a.grantee::pg_catalog.regrole
		FROM @extschema@.rl_sql_objects() AS o
		JOIN pg_catalog.pg_proc p ON o.kind OPERATOR(pg_catalog.=) 'FUNCTION'
			AND p.oid OPERATOR(pg_catalog.=) o.identity::pg_catalog.regprocedure,
			 pg_catalog.aclexplode(p.proacl) AS a
		WHERE a.grantee OPERATOR(pg_catalog.<>) 0 AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
		UNION
		SELECT o.kind, o.identity, a.grantee::pg_catalog.regrole
		FROM @extschema@.rl_sql_objects() AS o
		JOIN pg_catalog.pg_class c ON o.kind OPERATOR(pg_catalog.<>) 'FUNCTION' AND o.kind OPERATOR(pg_catalog.<>) 'TYPE'
			AND c.oid OPERATOR(pg_catalog.=) o.identity::pg_catalog.regclass,
			 pg_catalog.aclexplode(c.relacl) AS a
		WHERE a.grantee OPERATOR(pg_catalog.<>) 0 AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s',
								  CASE WHEN object.kind OPERATOR(pg_catalog.=) 'FUNCTION' THEN 'FUNCTION' ELSE 'TABLE' END,
								  object.identity, object.grantee);
	END LOOP;
END
$privileges$;

GRANT EXECUTE ON FUNCTION
	@extschema@.rl_take(pg_catalog.text, pg_catalog.text, double precision, integer, integer),
	@extschema@.rl_take(pg_catalog.text, pg_catalog.text, integer),
	@extschema@.rl_take_all(pg_catalog.text[], pg_catalog.text[], integer[]),
	@extschema@.rl_take_all(pg_catalog.text[], pg_catalog.text[], double precision[], integer[], integer[]),
	@extschema@.rl_take_all_detail(pg_catalog.text[], pg_catalog.text[], integer[]),
	@extschema@.rl_take_all_detail(pg_catalog.text[], pg_catalog.text[], double precision[], integer[], integer[]),
	@extschema@.rl_headers(@extschema@.rl_decision, pg_catalog.text, double precision, integer),
	@extschema@.rl_headers(@extschema@.rl_decision, pg_catalog.text),
	@extschema@.rl_guard(pg_catalog.text, pg_catalog.text, integer),
	@extschema@.rl_store_status(),
	@extschema@.rl_stats_read(),
	@extschema@.rl_cleanup_runs(),
	@extschema@.rl_sql_version(),
	@extschema@.rl_client_ip(pg_catalog.inet, pg_catalog.text, pg_catalog.cidr[]),
	@extschema@.rl_client_ip(pg_catalog.inet, pg_catalog.text),
	@extschema@.rl_client_ip_forwarded(pg_catalog.inet, pg_catalog.text, pg_catalog.cidr[]),
	@extschema@.rl_request_ip(pg_catalog.cidr[], pg_catalog.text),
	@extschema@.rl_ip_key(pg_catalog.inet, integer)
TO PUBLIC;
GRANT SELECT ON @extschema@.rl_policies, @extschema@.rl_stats TO PUBLIC;

$script$);

DROP PROCEDURE pg_temp.rl_sql_run(pg_catalog.text);
DROP TABLE pg_temp.rl_sql_install;
