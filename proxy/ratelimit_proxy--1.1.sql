/* ratelimit_proxy 1.1: the SQL calls of ratelimit, each run by PL/Proxy on
 * the shard that owns its (limiter, key).  The shards are the partitions of
 * the SQL/MED server "ratelimit" (FOREIGN DATA WRAPPER plproxy); each is a
 * normal ratelimit server, with the extension in the same schema as this
 * one.  Proxied calls run on the shard in autocommit, as the calling role. */

\echo Use "CREATE EXTENSION ratelimit_proxy" to load this file. \quit

CREATE TYPE rl_decision AS (
	allowed boolean,
	remaining integer,
	retry_after double precision,
	reset_after double precision
);

CREATE TYPE rl_decision_all AS (
	allowed boolean,
	remaining integer,
	retry_after double precision,
	reset_after double precision,
	limiter text
);

-- The routing hash, stable across servers, versions and byte orders so that
-- any client can compute a key's shard: the first four bytes of
-- SHA-256(limiter || 0x00 || key), both in UTF-8, as a big-endian integer
-- with its top bit cleared.  The shard is hash % partitions (PL/Proxy masks
-- with partitions - 1, the same for a power of two).  A NULL goes where an
-- empty string goes: the shard then refuses it with its own error.
CREATE FUNCTION rl_shard_hash(limiter text, key text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ('x' || encode(substr(sha256(convert_to(coalesce(limiter, ''), 'UTF8') || '\x00'::bytea
								   || convert_to(coalesce(key, ''), 'UTF8')), 1, 4), 'hex'))::bit(32)::integer
	   & 2147483647;

CREATE FUNCTION rl_take(limiter text, key text, rate double precision,
						burst integer, cost integer DEFAULT 1)
RETURNS rl_decision AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, key);
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_take_at(limiter text, key text, rate double precision,
						   burst integer, cost integer, at timestamptz)
RETURNS rl_decision AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, key);
$$ LANGUAGE plproxy;
REVOKE EXECUTE ON FUNCTION rl_take_at(text, text, double precision, integer, integer, timestamptz) FROM PUBLIC;

CREATE FUNCTION rl_reset(limiter text, key text)
RETURNS boolean AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, key);
$$ LANGUAGE plproxy;
REVOKE EXECUTE ON FUNCTION rl_reset(text, text) FROM PUBLIC;

-- Functions of the arguments alone run here, with the shards' own code (the
-- ratelimit library): no round trip, and no shard needs to be up.  The
-- two-argument rl_client_ip reads ratelimit.trusted_proxies of this server.
CREATE FUNCTION rl_client_ip(remote inet, xff text, trusted cidr[])
RETURNS inet
AS 'MODULE_PATHNAME', 'rl_client_ip'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

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

GRANT EXECUTE ON FUNCTION
	rl_shard_hash(text, text),
	rl_take(text, text, double precision, integer, integer),
	rl_client_ip(inet, text, cidr[]),
	rl_client_ip(inet, text),
	rl_client_ip_forwarded(inet, text, cidr[]),
	rl_ip_key(inet, integer)
TO PUBLIC;

-- Limits by policy: each shard keeps the same rl_policies (write a change to
-- every shard).
CREATE FUNCTION rl_take(limiter text, key text, cost integer DEFAULT 1)
RETURNS rl_decision AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, key);
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_refund(limiter text, key text, cost integer DEFAULT 1)
RETURNS boolean AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, key);
$$ LANGUAGE plproxy;
REVOKE EXECUTE ON FUNCTION rl_refund(text, text, integer) FROM PUBLIC;

-- rl_headers has no key: it runs on the shard of the limiter's name (with an
-- empty key), which holds the limiter's policy like every shard.
CREATE FUNCTION rl_headers(d rl_decision, limiter text, rate double precision, burst integer)
RETURNS jsonb AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, '');
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_headers(d rl_decision, limiter text)
RETURNS jsonb AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, '');
$$ LANGUAGE plproxy;

/*
 * rl_take_all.  Pairs that all live on one shard (and calls that one server
 * refuses as a whole) go to one shard in one call: its own all or nothing,
 * as the caller.  Pairs on several shards are taken shard after shard, in
 * the order the arrays first name them; when a shard denies or fails, the
 * shards that allowed get their cells back (rl_refund).  Between a take and
 * its refund another caller may find those cells spent: the window the
 * README describes.  The cross-shard part runs as the owner of this
 * extension, who may refund, and refunds only what the same call took.
 */

-- the number of partitions of the cluster "ratelimit" (0 when there is none)
CREATE FUNCTION rl_proxy_partitions()
RETURNS integer
LANGUAGE sql STABLE
RETURN (SELECT count(*)::integer
		FROM pg_catalog.pg_foreign_server s,
			 pg_catalog.pg_options_to_table(s.srvoptions) o
		WHERE s.srvname = 'ratelimit' AND o.option_name ~ '^p[0-9]+$');

-- the elements of arr at the positions idx (NULL stays NULL)
CREATE FUNCTION rl_proxy_pick(arr anyarray, idx integer[])
RETURNS anyarray
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN arr IS NOT NULL THEN ARRAY(SELECT arr[i] FROM unnest(idx) AS u(i)) END $$;

-- Routes a call: each pair's partition, or NULL for a call that one server
-- refuses as a whole (the first pair's shard then says why, having written
-- nothing).  Duplicates and NULLs are caught here because one shard would
-- otherwise refuse them after another one has taken.
CREATE FUNCTION rl_proxy_parts(limiters text[], keys text[], rates double precision[],
							   bursts integer[], costs integer[], policy boolean)
RETURNS integer[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN (SELECT CASE WHEN n > 0 AND cardinality(keys) BETWEEN 1 AND 16
					 AND cardinality(limiters) = cardinality(keys)
					 AND array_position(limiters, NULL) IS NULL
					 AND array_position(keys, NULL) IS NULL
					 AND (policy OR (cardinality(rates) = cardinality(keys)
									 AND cardinality(bursts) = cardinality(keys)
									 AND array_position(rates, NULL) IS NULL
									 AND array_position(bursts, NULL) IS NULL))
					 AND coalesce(cardinality(costs) = cardinality(keys)
								  AND array_position(costs, NULL) IS NULL, true)
					 AND (SELECT count(DISTINCT (l, k)) FROM unnest(limiters, keys) AS u(l, k))
						 = cardinality(keys)
				THEN ARRAY(SELECT @extschema@.rl_shard_hash(l, k) % n
						   FROM unnest(limiters, keys) WITH ORDINALITY AS u(l, k, i) ORDER BY i)
				END
		FROM (SELECT @extschema@.rl_proxy_partitions() AS n) c);

-- the whole call on the shard of its first pair
CREATE FUNCTION rl_proxy_take_all_first(limiters text[], keys text[], costs integer[])
RETURNS rl_decision_all AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiters[1], keys[1]);
	SELECT * FROM @extschema@.rl_take_all(limiters, keys, costs);
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_proxy_take_all_first(limiters text[], keys text[], rates double precision[],
										bursts integer[], costs integer[])
RETURNS rl_decision_all AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiters[1], keys[1]);
	SELECT * FROM @extschema@.rl_take_all(limiters, keys, rates, bursts, costs);
$$ LANGUAGE plproxy;

-- a part of a call on partition "shard"
CREATE FUNCTION rl_proxy_take_all_on(shard integer, limiters text[], keys text[], costs integer[])
RETURNS rl_decision_all AS $$
	CLUSTER 'ratelimit';
	RUN ON shard;
	SELECT * FROM @extschema@.rl_take_all(limiters, keys, costs);
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_proxy_take_all_on(shard integer, limiters text[], keys text[],
									 rates double precision[], bursts integer[], costs integer[])
RETURNS rl_decision_all AS $$
	CLUSTER 'ratelimit';
	RUN ON shard;
	SELECT * FROM @extschema@.rl_take_all(limiters, keys, rates, bursts, costs);
$$ LANGUAGE plproxy;

CREATE FUNCTION rl_proxy_refund_on(shard integer, limiters text[], keys text[], costs integer[])
RETURNS bigint AS $$
	CLUSTER 'ratelimit';
	RUN ON shard;
	SELECT count(*) AS rl_proxy_refund_on
	FROM unnest(limiters, keys, costs) AS u(l, k, c)
	WHERE @extschema@.rl_refund(l, k, c);
$$ LANGUAGE plproxy;

-- The pairs at positions idx, on partition "shard", in one call; rates IS
-- NULL selects the policy form.
CREATE FUNCTION rl_proxy_take_part(shard integer, idx integer[], limiters text[], keys text[],
								   rates double precision[], bursts integer[], costs integer[])
RETURNS rl_decision_all
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF rates IS NULL THEN
		RETURN @extschema@.rl_proxy_take_all_on(shard,
			@extschema@.rl_proxy_pick(limiters, idx), @extschema@.rl_proxy_pick(keys, idx),
			@extschema@.rl_proxy_pick(costs, idx));
	END IF;
	RETURN @extschema@.rl_proxy_take_all_on(shard,
		@extschema@.rl_proxy_pick(limiters, idx), @extschema@.rl_proxy_pick(keys, idx),
		@extschema@.rl_proxy_pick(rates, idx), @extschema@.rl_proxy_pick(bursts, idx),
		@extschema@.rl_proxy_pick(costs, idx));
END;
$$;

-- Gives back the cells that the partitions "taken" took for their pairs; a
-- shard that cannot be reached keeps them spent, with a warning.
CREATE FUNCTION rl_proxy_refund_all(taken integer[], parts integer[], limiters text[],
									keys text[], costs integer[])
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	shard integer;
	idx integer[];
BEGIN
	FOREACH shard IN ARRAY taken LOOP
		idx := array_positions(parts, shard);
		BEGIN
			PERFORM @extschema@.rl_proxy_refund_on(shard,
				@extschema@.rl_proxy_pick(limiters, idx), @extschema@.rl_proxy_pick(keys, idx),
				coalesce(@extschema@.rl_proxy_pick(costs, idx), array_fill(1, ARRAY[cardinality(idx)])));
		EXCEPTION WHEN OTHERS THEN
			RAISE WARNING 'ratelimit_proxy could not refund partition % after a denied rl_take_all: %',
				shard, SQLERRM;
		END;
	END LOOP;
END;
$$;

-- A call over several partitions; rates IS NULL selects the policy form.
CREATE FUNCTION rl_proxy_take_all_across(limiters text[], keys text[], rates double precision[],
										 bursts integer[], costs integer[])
RETURNS rl_decision_all
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	parts integer[] := @extschema@.rl_proxy_parts(limiters, keys, rates, bursts, costs, rates IS NULL);
	shards integer[] := ARRAY(SELECT p FROM unnest(parts) WITH ORDINALITY AS u(p, i)
							  GROUP BY p ORDER BY min(i));
	d @extschema@.rl_decision_all;
	decided @extschema@.rl_decision_all[] := '{}';
	firsts integer[] := '{}';	-- per shard: where its binding limiter first appears
	taken integer[] := '{}';	-- the partitions that allowed
	best integer;
BEGIN
	IF parts IS NULL THEN
		RAISE EXCEPTION 'rl_proxy_take_all_across needs a call that rl_take_all can route'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	FOR s IN 1 .. cardinality(shards) LOOP
		BEGIN
			d := @extschema@.rl_proxy_take_part(shards[s], array_positions(parts, shards[s]),
												limiters, keys, rates, bursts, costs);
		EXCEPTION WHEN OTHERS THEN
			PERFORM @extschema@.rl_proxy_refund_all(taken, parts, limiters, keys, costs);
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
		SELECT o INTO best FROM unnest(decided) WITH ORDINALITY AS u(a, r, t, z, l, o)
		ORDER BY r, firsts[o] LIMIT 1;
	ELSE
		-- denied: give back what the others took and read those buckets as
		-- they are again, as one server reports a denial that spent nothing
		PERFORM @extschema@.rl_proxy_refund_all(taken, parts, limiters, keys, costs);
		FOR s IN 1 .. cardinality(shards) LOOP
			CONTINUE WHEN NOT shards[s] = ANY (taken);
			decided[s] := @extschema@.rl_proxy_take_part(shards[s], array_positions(parts, shards[s]),
				limiters, keys, rates, bursts, array_fill(0, ARRAY[cardinality(keys)]));
		END LOOP;
		-- the binding limit: among the denied, a NULL retry_after (a cost
		-- above the burst) first, then the largest
		SELECT o INTO best FROM unnest(decided) WITH ORDINALITY AS u(a, r, t, z, l, o)
		WHERE NOT a ORDER BY t IS NULL DESC, t DESC, firsts[o] LIMIT 1;
	END IF;
	d := decided[best];
	SELECT min(x.remaining), max(x.reset_after) INTO d.remaining, d.reset_after
	FROM unnest(decided) x;
	RETURN d;
END;
$$;

CREATE FUNCTION rl_take_all(limiters text[], keys text[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	parts integer[] := @extschema@.rl_proxy_parts(limiters, keys, NULL, NULL, costs, true);
BEGIN
	IF parts IS NULL OR (SELECT count(DISTINCT p) FROM unnest(parts) AS u(p)) = 1 THEN
		RETURN @extschema@.rl_proxy_take_all_first(limiters, keys, costs);
	END IF;
	RETURN @extschema@.rl_proxy_take_all_across(limiters, keys, NULL, NULL, costs);
END;
$$;

CREATE FUNCTION rl_take_all(limiters text[], keys text[], rates double precision[],
							bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	parts integer[] := @extschema@.rl_proxy_parts(limiters, keys, rates, bursts, costs, false);
BEGIN
	IF parts IS NULL OR (SELECT count(DISTINCT p) FROM unnest(parts) AS u(p)) = 1 THEN
		RETURN @extschema@.rl_proxy_take_all_first(limiters, keys, rates, bursts, costs);
	END IF;
	RETURN @extschema@.rl_proxy_take_all_across(limiters, keys, rates, bursts, costs);
END;
$$;

-- Privileges are explicit, whatever ALTER DEFAULT PRIVILEGES says.
GRANT EXECUTE ON FUNCTION
	rl_take(text, text, integer),
	rl_headers(rl_decision, text, double precision, integer),
	rl_headers(rl_decision, text),
	rl_take_all(text[], text[], integer[]),
	rl_take_all(text[], text[], double precision[], integer[], integer[]),
	rl_proxy_partitions(),
	rl_proxy_pick(anyarray, integer[]),
	rl_proxy_parts(text[], text[], double precision[], integer[], integer[], boolean),
	rl_proxy_take_all_first(text[], text[], integer[]),
	rl_proxy_take_all_first(text[], text[], double precision[], integer[], integer[]),
	rl_proxy_take_all_across(text[], text[], double precision[], integer[], integer[])
TO PUBLIC;
-- a part of a call, and a refund, only inside rl_proxy_take_all_across
REVOKE EXECUTE ON FUNCTION
	rl_proxy_take_all_on(integer, text[], text[], integer[]),
	rl_proxy_take_all_on(integer, text[], text[], double precision[], integer[], integer[]),
	rl_proxy_refund_on(integer, text[], text[], integer[]),
	rl_proxy_take_part(integer, integer[], text[], text[], double precision[], integer[], integer[]),
	rl_proxy_refund_all(integer[], integer[], text[], text[], integer[])
FROM PUBLIC;

-- Grants that ALTER DEFAULT PRIVILEGES added to the functions above go: the
-- ones revoked from PUBLIC are for the roles they are granted to later.
DO $$
DECLARE
	fn regprocedure;
	grantee regrole;
BEGIN
	FOR fn, grantee IN
		SELECT DISTINCT p.oid::regprocedure, a.grantee::regrole
		FROM pg_catalog.pg_depend d
		JOIN pg_catalog.pg_proc p ON p.oid = d.objid, pg_catalog.aclexplode(p.proacl) AS a
		WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
		  AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'ratelimit_proxy')
		  AND a.grantee NOT IN (0, p.proowner)
	LOOP
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', fn, grantee);
	END LOOP;
END $$;
