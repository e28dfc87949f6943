-- The model test: random limits, costs and request times, with limit changes
-- on one key, and every field of every rl_take_at decision compared with a
-- reference written here from the contract's formula, in integer microseconds
-- (numeric for the 128-bit rescaling), never calling the extension's code.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(42);

-- The reference bucket store and decision.
CREATE TEMP TABLE ref_bucket (key text PRIMARY KEY, tat bigint, t bigint);

CREATE FUNCTION pg_temp.ref_interval(rate float8) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	x float8 := 1e6::float8 / rate;
BEGIN
	-- round half away from zero, as C's round()
	RETURN greatest(1, CASE WHEN x - floor(x) >= 0.5 THEN floor(x) + 1 ELSE floor(x) END);
END $$;

CREATE FUNCTION pg_temp.ref_take(k text, rate float8, burst int, cost int, now_us bigint,
	OUT allowed boolean, OUT remaining int, OUT retry_after float8, OUT reset_after float8)
LANGUAGE plpgsql AS $$
DECLARE
	t bigint := pg_temp.ref_interval(rate);
	tau bigint := t * burst;
	old record;
	debt numeric := 0;
	tat_used bigint;
	tat_after bigint;
	new_tat bigint;
	rescaled boolean := false;
BEGIN
	SELECT * INTO old FROM ref_bucket b WHERE b.key = k;
	IF FOUND AND old.tat >= now_us THEN
		debt := old.tat - now_us;
		IF old.t <> t THEN
			debt := floor(debt * t / old.t);
		END IF;
		debt := least(debt, tau);
		rescaled := debt <> old.tat - now_us OR old.t <> t;
	END IF;
	tat_used := now_us + debt::bigint;

	IF cost = 0 THEN
		allowed := true;
		retry_after := 0;
		tat_after := tat_used;
	ELSIF cost > burst THEN
		allowed := false;
		retry_after := NULL;
		tat_after := tat_used;
	ELSE
		new_tat := tat_used + cost * t;
		allowed := new_tat - now_us <= tau;
		retry_after := CASE WHEN allowed THEN 0
			ELSE (new_tat - now_us - tau)::float8 / 1e6 END;
		tat_after := CASE WHEN allowed THEN new_tat ELSE tat_used END;
	END IF;

	IF cost > 0 AND (allowed OR rescaled) THEN
		INSERT INTO ref_bucket VALUES (k, tat_after, t)
			ON CONFLICT (key) DO UPDATE SET tat = excluded.tat, t = excluded.t;
	END IF;
	remaining := least(burst, greatest(0, floor((now_us + tau - tat_after)::numeric / t)));
	reset_after := greatest(0, tat_after - now_us)::float8 / 1e6;
END $$;

-- 40 keys, each with 80 requests: random rate (0.01/s to 10 000/s), burst,
-- cost and gaps; every fourth key switches to another limit for requests
-- 30 to 59 and back.
SELECT setseed(0.31415);
CREATE TEMP TABLE plan_key AS
SELECT k,
	   10 ^ (random() * 6 - 2) AS rate, 1 + floor(random() * 12)::int AS burst,
	   10 ^ (random() * 6 - 2) AS rate2, 1 + floor(random() * 12)::int AS burst2
FROM generate_series(1, 40) AS k;

CREATE TEMP TABLE plan_request AS
SELECT k, i,
	   CASE WHEN k % 4 = 0 AND i BETWEEN 30 AND 59 THEN rate2 ELSE rate END AS rate,
	   CASE WHEN k % 4 = 0 AND i BETWEEN 30 AND 59 THEN burst2 ELSE burst END AS burst,
	   random() AS r_cost, random() AS r_gap
FROM plan_key, generate_series(1, 80) AS i;

ALTER TABLE plan_request ADD cost int, ADD gap bigint;
UPDATE plan_request SET
	cost = CASE WHEN r_cost < 0.08 THEN 0
				WHEN r_cost < 0.13 THEN burst + 1
				WHEN r_cost < 0.25 THEN 1 + floor((r_cost - 0.13) / 0.12 * burst)::int
				ELSE 1 END,
	-- mostly faster than the rate, sometimes long pauses that empty the bucket
	gap = floor(pg_temp.ref_interval(rate) * CASE WHEN r_gap < 0.9 THEN r_gap * 0.8
												ELSE (r_gap - 0.9) * 40 END)::bigint;

CREATE TEMP TABLE plan_time AS
SELECT k, i, rate, burst, cost,
	   (sum(gap) OVER (PARTITION BY k ORDER BY i))::bigint AS at_us
FROM plan_request;

CREATE TEMP TABLE got (k int, i int, allowed boolean, remaining int,
					   retry_after float8, reset_after float8);
CREATE TEMP TABLE want (LIKE got);

DO $$
DECLARE
	r record;
	base timestamptz := '2031-03-04 05:06:07.000008+00';
BEGIN
	FOR r IN SELECT * FROM plan_time ORDER BY k, i LOOP
		INSERT INTO got SELECT r.k, r.i, d.*
			FROM rl_take_at('model', 'key ' || r.k, r.rate, r.burst, r.cost,
							base + (r.at_us || ' microseconds')::interval) d;
		INSERT INTO want SELECT r.k, r.i, d.*
			FROM pg_temp.ref_take('key ' || r.k, r.rate, r.burst, r.cost,
								  (extract(epoch FROM base) * 1e6)::bigint + r.at_us) d;
	END LOOP;
END $$;

SELECT results_eq(
	format('SELECT i, allowed, remaining, retry_after, reset_after FROM got WHERE k = %s ORDER BY i', k),
	format('SELECT i, allowed, remaining, retry_after, reset_after FROM want WHERE k = %s ORDER BY i', k),
	format('key %s: rate %s/s, burst %s%s: all 80 decisions match the reference',
		   k, round(rate::numeric, 4), burst,
		   CASE WHEN k % 4 = 0 THEN format(', then %s/s, burst %s, then back',
										  round(rate2::numeric, 4), burst2) ELSE '' END))
FROM plan_key ORDER BY k;

-- The sample exercises both outcomes and every kind of cost.
SELECT ok((SELECT count(*) FILTER (WHERE allowed AND c.cost > 0) > 800
				  AND count(*) FILTER (WHERE NOT allowed AND c.cost <= c.burst) > 300
				  AND count(*) FILTER (WHERE c.cost > c.burst) > 50
				  AND count(*) FILTER (WHERE c.cost = 0) > 50
		   FROM got JOIN plan_time c USING (k, i)),
		  'the sample has many allowed, denied, over-burst and peek requests');

-- What is stored (hashed key, tat, interval) is what the reference stores.
CREATE TEMP VIEW model_key AS
SELECT 'key ' || k AS key,
	   sha256(convert_to('model', 'UTF8') || '\x00'::bytea || convert_to('key ' || k, 'UTF8')) AS hash
FROM generate_series(1, 40) AS k;

-- (the memory store keeps no rows: there the decisions above are the check)
SELECT CASE current_setting('ratelimit.store') WHEN 'table' THEN set_eq(
	$$SELECT b.key, b.tat, b.interval_us FROM rl_buckets b JOIN model_key m ON b.key = m.hash$$,
	$$SELECT m.hash, 'epoch'::timestamptz + (r.tat || ' microseconds')::interval, r.t
	  FROM ref_bucket r JOIN model_key m USING (key)$$,
	'the stored buckets are the reference buckets')
	ELSE skip('the memory store keeps its buckets in shared memory', 1) END;

SELECT * FROM finish();
ROLLBACK;
