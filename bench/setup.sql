-- Objects for bench/run: the floors and a PL/pgSQL baseline beside rl_take,
-- a policy, and the keys of rl_take_all.
CREATE EXTENSION ratelimit;

-- floors: the cheapest round trips that read or write one row
CREATE UNLOGGED TABLE floor_row (k integer PRIMARY KEY, v bigint NOT NULL);
INSERT INTO floor_row SELECT k, 0 FROM generate_series(1, 100000) AS k;

-- GCRA as a competent user would write it without the extension: one
-- INSERT ... ON CONFLICT DO UPDATE ... WHERE <allowed> RETURNING, then a read
-- on denial, SHA-256 keys, an unlogged table.
CREATE UNLOGGED TABLE plpgsql_bucket (key bytea PRIMARY KEY, tat timestamptz NOT NULL);
CREATE FUNCTION plpgsql_take(limiter text, key text, rate double precision, burst integer,
							 OUT allowed boolean, OUT remaining integer,
							 OUT retry_after double precision)
LANGUAGE plpgsql AS $$
DECLARE
	k bytea := sha256(convert_to(limiter, 'UTF8') || '\x00'::bytea || convert_to(key, 'UTF8'));
	t interval := make_interval(secs => 1 / rate);
	tau interval := make_interval(secs => burst / rate);
	now timestamptz := clock_timestamp();
	tat timestamptz;
BEGIN
	INSERT INTO plpgsql_bucket AS b VALUES (k, now + t)
	ON CONFLICT ON CONSTRAINT plpgsql_bucket_pkey DO UPDATE
		SET tat = greatest(b.tat, now) + t
		WHERE greatest(b.tat, now) + t - now <= tau
	RETURNING b.tat INTO tat;
	IF FOUND THEN
		allowed := true;
		remaining := floor(extract(epoch FROM now + tau - tat) * rate);
		retry_after := 0;
		RETURN;
	END IF;
	SELECT b.tat INTO tat FROM plpgsql_bucket b WHERE b.key = k;
	allowed := false;
	remaining := 0;
	retry_after := extract(epoch FROM greatest(tat, now) + t - now - tau);
END $$;

-- rate-limiter-flexible's RateLimiterPostgres: a fixed-window counter, the
-- table its _getCreateTableStmt makes (logged), and the same unlogged; its
-- consume is one upsert that writes on every call, a denial too (rlflx_*.sql)
CREATE TABLE rlflx (key varchar(255) PRIMARY KEY, points integer NOT NULL DEFAULT 0, expire bigint);
CREATE UNLOGGED TABLE rlflx_unlogged (LIKE rlflx INCLUDING ALL);
INSERT INTO rlflx SELECT 'rlflx:user' || k, 1, 0 FROM generate_series(1, 100000) AS k;
INSERT INTO rlflx_unlogged SELECT * FROM rlflx;

-- warm every key of the spread runs, and exhaust the denied key
SELECT count(*) FROM (SELECT rl_take('spread', 'user' || k, 10, 100) FROM generate_series(1, 100000) AS k) s;
SELECT count(*) FROM (SELECT plpgsql_take('spread', 'user' || k, 10, 100) FROM generate_series(1, 100000) AS k) s;
-- the policy call decides the same keys by a policy of the same limit, under
-- a limiter name of its own (a limiter with a policy is decided by it only)
INSERT INTO rl_policies VALUES ('spread_policy', 10, 100);
SELECT count(*) FROM (SELECT rl_take('spread_policy', 'user' || k) FROM generate_series(1, 100000) AS k) s;
SELECT count(*) FROM (SELECT rl_take_all(ARRAY['pair_ip', 'pair_account'], ARRAY['ip' || k, 'user' || k],
										 ARRAY[10, 10]::float8[], ARRAY[100, 100])
					  FROM generate_series(1, 100000) AS k) s;
SELECT rl_take('denied', 'attacker', 0.000001, 1);
SELECT plpgsql_take('denied', 'attacker', 0.000001, 1);
VACUUM ANALYZE;
