/* ratelimit_proxy 1.1 -> 1.2.  A fresh 1.2 install runs
 * ratelimit_proxy--1.1.sql and then this file (the Makefile joins them into
 * ratelimit_proxy--1.2.sql), so both paths make the same objects. */

\echo Use "ALTER EXTENSION ratelimit_proxy UPDATE TO '1.2'" to load this file. \quit

-- rl_take_all_detail (1.2): rl_take_all's answer and each request's own
-- decision, as the shards answer it.
CREATE TYPE rl_decision_detail AS (
	allowed boolean,
	remaining integer,
	retry_after double precision,
	reset_after double precision,
	limiter text,
	requests rl_decision[]		-- in the order of the arrays
);

-- the whole call on the shard of its first pair
CREATE FUNCTION rl_proxy_take_all_detail_first(limiters text[], keys text[], costs integer[])
RETURNS rl_decision_detail AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiters[1], keys[1]);
	SELECT * FROM @extschema@.rl_take_all_detail(limiters, keys, costs);
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_proxy_take_all_detail_first(limiters text[], keys text[], rates double precision[],
											   bursts integer[], costs integer[])
RETURNS rl_decision_detail AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiters[1], keys[1]);
	SELECT * FROM @extschema@.rl_take_all_detail(limiters, keys, rates, bursts, costs);
$$ LANGUAGE plproxy;

-- Whether a call goes to one shard as a whole: its pairs all live there, or
-- one server refuses it as a whole (rl_proxy_parts is NULL).
CREATE FUNCTION rl_proxy_one_shard(parts integer[])
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN parts IS NULL OR (SELECT count(DISTINCT p) = 1 FROM unnest(parts) AS u(p));

-- The cross-shard rl_take_all (1.2): takes with the caller's rights; only the
-- refund of what the same call took runs with the owner's.
-- A part is the pairs of one shard, so the shard of its first pair is its
-- shard: taken as a whole call there (rl_proxy_take_all_detail_first), by
-- rl_proxy_take_part in C (src/proxy.c), which remembers what it took and
-- gives a shard's error the caller's element number and function.
DROP FUNCTION rl_proxy_take_part(integer, integer[], text[], text[], double precision[],
								 integer[], integer[]);
DROP FUNCTION rl_proxy_refund_all(integer[], integer[], text[], text[], integer[]);
DROP FUNCTION rl_proxy_take_all_on(integer, text[], text[], integer[]);
DROP FUNCTION rl_proxy_take_all_on(integer, text[], text[], double precision[], integer[], integer[]);
DROP FUNCTION rl_proxy_refund_on(integer, text[], text[], integer[]);
DROP FUNCTION rl_proxy_take_all_across(text[], text[], double precision[], integer[], integer[]);

-- function: the caller's, which a shard's error names
CREATE FUNCTION rl_proxy_take_part(function text, first boolean, idx integer[], limiters text[],
								   keys text[], rates double precision[], bursts integer[],
								   costs integer[])
RETURNS rl_decision_detail
AS 'MODULE_PATHNAME', 'rl_proxy_take_part'
LANGUAGE C VOLATILE;

-- the parts taken since the call began, each once (then forgotten)
CREATE FUNCTION rl_proxy_taken(OUT idx text, OUT limiters text, OUT keys text, OUT costs text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_proxy_taken'
LANGUAGE C VOLATILE;

CREATE FUNCTION rl_proxy_forget_taken()
RETURNS void
AS 'MODULE_PATHNAME', 'rl_proxy_forget_taken'
LANGUAGE C VOLATILE;

-- cells back on the shard of the first pair, by the owner's rights
CREATE FUNCTION rl_proxy_refund_first(limiters text[], keys text[], costs integer[])
RETURNS bigint AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiters[1], keys[1]);
	SELECT count(*) AS rl_proxy_refund_first
	FROM unnest(limiters, keys, costs) AS u(l, k, c)
	WHERE @extschema@.rl_refund(l, k, c);
$$ LANGUAGE plproxy;

-- Gives back what this call's parts took, and nothing else: the parts that
-- rl_proxy_take_part remembered.  A shard that cannot be reached keeps its
-- cells spent, with a warning.
CREATE FUNCTION rl_proxy_refund_taken()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	t record;
	idx integer[];
BEGIN
	FOR t IN SELECT * FROM @extschema@.rl_proxy_taken() LOOP
		idx := t.idx::integer[];
		BEGIN
			PERFORM @extschema@.rl_proxy_refund_first(
				@extschema@.rl_proxy_pick(t.limiters::text[], idx),
				@extschema@.rl_proxy_pick(t.keys::text[], idx),
				coalesce(@extschema@.rl_proxy_pick(t.costs::integer[], idx),
						 array_fill(1, ARRAY[cardinality(idx)])));
		EXCEPTION WHEN OTHERS THEN
			RAISE WARNING 'ratelimit_proxy could not refund partition % after a denied rl_take_all: %',
				@extschema@.rl_shard_hash((t.limiters::text[])[idx[1]], (t.keys::text[])[idx[1]])
					% @extschema@.rl_proxy_partitions(), SQLERRM;
		END;
	END LOOP;
END;
$$;

-- A call over several partitions, as the caller, for function (rl_take_all
-- or rl_take_all_detail: the name a shard's error gives); rates IS NULL
-- selects the policy form.
CREATE FUNCTION rl_proxy_take_all_across(function text, limiters text[], keys text[],
										 rates double precision[], bursts integer[], costs integer[])
RETURNS rl_decision_detail
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	parts integer[] := @extschema@.rl_proxy_parts(limiters, keys, rates, bursts, costs, rates IS NULL);
	shards integer[] := ARRAY(SELECT p FROM unnest(parts) WITH ORDINALITY AS u(p, i)
							  GROUP BY p ORDER BY min(i));
	d @extschema@.rl_decision_detail;
	decided @extschema@.rl_decision_detail[] := '{}';
	firsts integer[] := '{}';	-- per shard: where its binding limiter first appears
	taken integer[] := '{}';	-- the partitions that allowed
	requests @extschema@.rl_decision[] := '{}';
	idx integer[];
	best integer;
BEGIN
	IF parts IS NULL THEN
		RAISE EXCEPTION 'rl_proxy_take_all_across needs a call that rl_take_all can route'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	FOR s IN 1 .. cardinality(shards) LOOP
		BEGIN
			d := @extschema@.rl_proxy_take_part(function, s = 1, array_positions(parts, shards[s]),
												limiters, keys, rates, bursts, costs);
		EXCEPTION WHEN OTHERS THEN
			PERFORM @extschema@.rl_proxy_refund_taken();
			RAISE;
		END;
		decided := decided || d;
		firsts := firsts || (SELECT min(i) FROM unnest(array_positions(parts, shards[s])) AS u(i)
							 WHERE limiters[i] = d.limiter);
		IF d.allowed THEN
			taken := taken || shards[s];
		END IF;
	END LOOP;

	IF cardinality(taken) = cardinality(shards) THEN
		-- allowed: the binding limit has the least remaining
		SELECT o INTO best FROM unnest(decided) WITH ORDINALITY AS u(a, r, t, z, l, q, o)
		ORDER BY r, firsts[o] LIMIT 1;
	ELSE
		-- denied: give back what the others took and read those buckets as
		-- they are again, as one server reports a denial that spent nothing
		PERFORM @extschema@.rl_proxy_refund_taken();
		FOR s IN 1 .. cardinality(shards) LOOP
			CONTINUE WHEN NOT shards[s] = ANY (taken);
			decided[s] := @extschema@.rl_proxy_take_part(function, false, array_positions(parts, shards[s]),
				limiters, keys, rates, bursts, array_fill(0, ARRAY[cardinality(keys)]));
		END LOOP;
		-- the binding limit: among the denied, a NULL retry_after (a cost
		-- above the burst) first, then the largest
		SELECT o INTO best FROM unnest(decided) WITH ORDINALITY AS u(a, r, t, z, l, q, o)
		WHERE NOT a ORDER BY t IS NULL DESC, t DESC, firsts[o] LIMIT 1;
	END IF;
	PERFORM @extschema@.rl_proxy_forget_taken();

	-- each request's own decision, from its shard's, in the caller's order
	requests := array_fill(NULL::@extschema@.rl_decision, ARRAY[cardinality(keys)]);
	FOR s IN 1 .. cardinality(shards) LOOP
		idx := array_positions(parts, shards[s]);
		FOR j IN 1 .. cardinality(idx) LOOP
			requests[idx[j]] := (decided[s]).requests[j];
		END LOOP;
	END LOOP;
	d := decided[best];
	SELECT min(x.remaining), max(x.reset_after) INTO d.remaining, d.reset_after
	FROM unnest(decided) x;
	d.requests := requests;
	RETURN d;
END;
$$;

-- rl_take_all and rl_take_all_detail, each form: one shard decides a call
-- whose pairs all live there; otherwise rl_proxy_take_all_across.
CREATE OR REPLACE FUNCTION rl_take_all(limiters text[], keys text[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	d @extschema@.rl_decision_detail;
BEGIN
	IF @extschema@.rl_proxy_one_shard(@extschema@.rl_proxy_parts(limiters, keys, NULL, NULL, costs, true)) THEN
		RETURN @extschema@.rl_proxy_take_all_first(limiters, keys, costs);
	END IF;
	d := @extschema@.rl_proxy_take_all_across('rl_take_all', limiters, keys, NULL, NULL, costs);
	RETURN (d.allowed, d.remaining, d.retry_after, d.reset_after, d.limiter)::@extschema@.rl_decision_all;
END;
$$;

CREATE OR REPLACE FUNCTION rl_take_all(limiters text[], keys text[], rates double precision[],
									   bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	d @extschema@.rl_decision_detail;
BEGIN
	IF @extschema@.rl_proxy_one_shard(@extschema@.rl_proxy_parts(limiters, keys, rates, bursts, costs, false)) THEN
		RETURN @extschema@.rl_proxy_take_all_first(limiters, keys, rates, bursts, costs);
	END IF;
	d := @extschema@.rl_proxy_take_all_across('rl_take_all', limiters, keys, rates, bursts, costs);
	RETURN (d.allowed, d.remaining, d.retry_after, d.reset_after, d.limiter)::@extschema@.rl_decision_all;
END;
$$;

CREATE FUNCTION rl_take_all_detail(limiters text[], keys text[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_detail
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF @extschema@.rl_proxy_one_shard(@extschema@.rl_proxy_parts(limiters, keys, NULL, NULL, costs, true)) THEN
		RETURN @extschema@.rl_proxy_take_all_detail_first(limiters, keys, costs);
	END IF;
	RETURN @extschema@.rl_proxy_take_all_across('rl_take_all_detail', limiters, keys, NULL, NULL, costs);
END;
$$;

CREATE FUNCTION rl_take_all_detail(limiters text[], keys text[], rates double precision[],
								   bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_detail
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF @extschema@.rl_proxy_one_shard(@extschema@.rl_proxy_parts(limiters, keys, rates, bursts, costs, false)) THEN
		RETURN @extschema@.rl_proxy_take_all_detail_first(limiters, keys, rates, bursts, costs);
	END IF;
	RETURN @extschema@.rl_proxy_take_all_across('rl_take_all_detail', limiters, keys, rates, bursts, costs);
END;
$$;

GRANT EXECUTE ON FUNCTION
	rl_proxy_take_part(text, boolean, integer[], text[], text[], double precision[], integer[], integer[]),
	rl_proxy_forget_taken(),
	rl_proxy_refund_taken(),
	rl_proxy_one_shard(integer[]),
	rl_proxy_take_all_across(text, text[], text[], double precision[], integer[], integer[]),
	rl_proxy_take_all_detail_first(text[], text[], integer[]),
	rl_proxy_take_all_detail_first(text[], text[], double precision[], integer[], integer[]),
	rl_take_all_detail(text[], text[], integer[]),
	rl_take_all_detail(text[], text[], double precision[], integer[], integer[])
TO PUBLIC;
REVOKE EXECUTE ON FUNCTION
	rl_proxy_taken(),
	rl_proxy_refund_first(text[], text[], integer[])
FROM PUBLIC;

-- rl_policies, as a view of the first shard that answers (each shard keeps
-- the same policies): clients read it with the SQL they run on one server,
-- SELECT limiter, rate, burst, shadow FROM rl_policies.
CREATE FUNCTION rl_proxy_policies_on(shard integer, OUT limiter text, OUT rate double precision,
									 OUT burst integer, OUT shadow boolean)
RETURNS SETOF record AS $$
	CLUSTER 'ratelimit';
	RUN ON shard;
	SELECT limiter, rate, burst, shadow FROM @extschema@.rl_policies;
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_proxy_policies(OUT limiter text, OUT rate double precision,
								  OUT burst integer, OUT shadow boolean)
RETURNS SETOF record
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	last integer := greatest(@extschema@.rl_proxy_partitions(), 1) - 1;
BEGIN
	FOR p IN 0 .. last - 1 LOOP
		BEGIN
			RETURN QUERY SELECT * FROM @extschema@.rl_proxy_policies_on(p);
			RETURN;
		EXCEPTION WHEN OTHERS THEN
			NULL;	-- the next shard holds the same policies
		END;
	END LOOP;
	-- the last one's error is the caller's
	RETURN QUERY SELECT * FROM @extschema@.rl_proxy_policies_on(last);
END;
$$;

CREATE VIEW rl_policies AS SELECT limiter, rate, burst, shadow FROM rl_proxy_policies();

GRANT EXECUTE ON FUNCTION
	rl_proxy_policies_on(integer),
	rl_proxy_policies()
TO PUBLIC;
GRANT SELECT ON rl_policies TO PUBLIC;

-- Grants that ALTER DEFAULT PRIVILEGES added to the objects made above go
-- (the grants of older objects are the administrator's, and stay).
DO $$
DECLARE
	fn regprocedure;
	grantee regrole;
BEGIN
	FOR fn, grantee IN
		SELECT DISTINCT p.oid::regprocedure, a.grantee::regrole
		FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) AS a
		WHERE p.oid IN ('rl_proxy_take_part(text, boolean, integer[], text[], text[], double precision[], integer[], integer[])'::regprocedure,
						'rl_proxy_one_shard(integer[])'::regprocedure,
						'rl_proxy_take_all_across(text, text[], text[], double precision[], integer[], integer[])'::regprocedure,
						'rl_proxy_take_all_detail_first(text[], text[], integer[])'::regprocedure,
						'rl_proxy_take_all_detail_first(text[], text[], double precision[], integer[], integer[])'::regprocedure,
						'rl_take_all_detail(text[], text[], integer[])'::regprocedure,
						'rl_take_all_detail(text[], text[], double precision[], integer[], integer[])'::regprocedure,
						'rl_proxy_taken()'::regprocedure,
						'rl_proxy_forget_taken()'::regprocedure,
						'rl_proxy_refund_first(text[], text[], integer[])'::regprocedure,
						'rl_proxy_refund_taken()'::regprocedure,
						'rl_proxy_policies_on(integer)'::regprocedure,
						'rl_proxy_policies()'::regprocedure)
		  AND a.grantee NOT IN (0, p.proowner)
	LOOP
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', fn, grantee);
	END LOOP;
	FOR grantee IN
		SELECT DISTINCT a.grantee::regrole
		FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) AS a
		WHERE c.oid = 'rl_policies'::regclass AND a.grantee NOT IN (0, c.relowner)
	LOOP
		EXECUTE format('REVOKE ALL ON rl_policies FROM %s', grantee);
	END LOOP;
END $$;
REVOKE ALL ON rl_policies FROM PUBLIC;
GRANT SELECT ON rl_policies TO PUBLIC;
