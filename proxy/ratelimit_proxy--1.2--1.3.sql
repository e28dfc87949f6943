/* ratelimit_proxy 1.2 -> 1.3.  A fresh 1.3 install runs
 * ratelimit_proxy--1.1.sql and every upgrade after it (the Makefile joins
 * them into ratelimit_proxy--1.3.sql), so every path makes the same objects.
 * Lockouts and durable limits are the shards' (ratelimit 1.3): each shard
 * decides, locks and keeps its own keys, and the proxy passes the answers on. */

\echo Use "ALTER EXTENSION ratelimit_proxy UPDATE TO '1.3'" to load this file. \quit

-- The policy form at an explicit time (1.3), on the shard of (limiter, key);
-- revoked from PUBLIC as on a shard: a caller who picks the clock can lock a
-- key.
CREATE FUNCTION rl_take_at(limiter text, key text, cost integer, at timestamptz)
RETURNS rl_decision AS $$
	CLUSTER 'ratelimit';
	RUN ON @extschema@.rl_shard_hash(limiter, key);
$$ LANGUAGE plproxy;
REVOKE EXECUTE ON FUNCTION rl_take_at(text, text, integer, timestamptz) FROM PUBLIC;

-- rl_policies with the lockout and durable columns of 1.3, as on a shard, read from the
-- first shard that answers.  The OUT columns change, so the view and the two
-- functions are made again, with the privileges they had (an administrator's
-- grants and revokes included).  The grants that ALTER DEFAULT PRIVILEGES
-- gives new objects go, rl_take_at's too.
DO $$
DECLARE
	-- the privileges of each one before, and its owner
	on_acl aclitem[];
	on_owner oid;
	policies_acl aclitem[];
	policies_owner oid;
	view_acl aclitem[];
	view_owner oid;
	o record;
	a record;
BEGIN
	SELECT coalesce(proacl, acldefault('f', proowner)), proowner INTO on_acl, on_owner
	FROM pg_catalog.pg_proc WHERE oid = 'rl_proxy_policies_on(integer)'::regprocedure;
	SELECT coalesce(proacl, acldefault('f', proowner)), proowner INTO policies_acl, policies_owner
	FROM pg_catalog.pg_proc WHERE oid = 'rl_proxy_policies()'::regprocedure;
	SELECT coalesce(relacl, acldefault('r', relowner)), relowner INTO view_acl, view_owner
	FROM pg_catalog.pg_class WHERE oid = 'rl_policies'::regclass;
	DROP VIEW rl_policies;
	DROP FUNCTION rl_proxy_policies();
	DROP FUNCTION rl_proxy_policies_on(integer);

	CREATE FUNCTION rl_proxy_policies_on(shard integer, OUT limiter text, OUT rate double precision,
										 OUT burst integer, OUT shadow boolean, OUT lockout interval,
										 OUT lockout_growth double precision, OUT lockout_max interval,
										 OUT durable boolean)
	RETURNS SETOF record AS $body$
		CLUSTER 'ratelimit';
		RUN ON shard;
		SELECT limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max, durable
		FROM @extschema@.rl_policies;
	$body$ LANGUAGE plproxy;

	CREATE FUNCTION rl_proxy_policies(OUT limiter text, OUT rate double precision,
									  OUT burst integer, OUT shadow boolean, OUT lockout interval,
									  OUT lockout_growth double precision, OUT lockout_max interval,
									  OUT durable boolean)
	RETURNS SETOF record
	LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
	AS $body$
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
	$body$;

	CREATE VIEW rl_policies AS
		SELECT limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max, durable
		FROM rl_proxy_policies();

	FOR o IN
		SELECT v.*
		FROM (VALUES
			('FUNCTION rl_proxy_policies_on(integer)', on_acl, on_owner,
			 (SELECT coalesce(proacl, acldefault('f', proowner)) FROM pg_catalog.pg_proc
			  WHERE oid = 'rl_proxy_policies_on(integer)'::regprocedure)),
			('FUNCTION rl_proxy_policies()', policies_acl, policies_owner,
			 (SELECT coalesce(proacl, acldefault('f', proowner)) FROM pg_catalog.pg_proc
			  WHERE oid = 'rl_proxy_policies()'::regprocedure)),
			('TABLE rl_policies', view_acl, view_owner,
			 (SELECT coalesce(relacl, acldefault('r', relowner)) FROM pg_catalog.pg_class
			  WHERE oid = 'rl_policies'::regclass)),
			-- new in 1.3: its owner's alone
			('FUNCTION rl_take_at(text, text, integer, timestamptz)', NULL, NULL,
			 (SELECT proacl FROM pg_catalog.pg_proc
			  WHERE oid = 'rl_take_at(text, text, integer, timestamptz)'::regprocedure)))
			AS v(object, old_acl, old_owner, new_acl)
	LOOP
		-- what the new object was given (ALTER DEFAULT PRIVILEGES' grants too)
		-- goes, and what the old one had comes back; each owner keeps its own
		FOR a IN
			SELECT DISTINCT CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE x.grantee::regrole::text END AS grantee
			FROM pg_catalog.aclexplode(o.new_acl) AS x
			WHERE x.grantee <> current_user::regrole
		LOOP
			EXECUTE format('REVOKE ALL ON %s FROM %s', o.object, a.grantee);
		END LOOP;
		FOR a IN
			SELECT CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE x.grantee::regrole::text END AS grantee,
				   x.privilege_type, x.is_grantable
			FROM pg_catalog.aclexplode(o.old_acl) AS x
			WHERE x.grantee <> o.old_owner
		LOOP
			EXECUTE format('GRANT %s ON %s TO %s%s', a.privilege_type, o.object, a.grantee,
						   CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
	END LOOP;
END $$;

