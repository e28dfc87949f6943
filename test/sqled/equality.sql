-- The C extension and the SQL edition side by side, in the schemas c_ed and
-- sql_ed of one database: 20 000 random decisions at explicit times (random
-- limits, costs, peeks, costs above the burst, limit changes, lockouts,
-- shadow policies) answer identically to the microsecond, and leave the
-- same buckets.  Run by a superuser (it creates the C extension) from the
-- checkout's root.
BEGIN;
CREATE SCHEMA c_ed;
CREATE SCHEMA sql_ed;
CREATE EXTENSION ratelimit SCHEMA c_ed;
SET LOCAL ratelimit.in_transaction = allow;
SET LOCAL search_path = sql_ed;
\i managed/ratelimit_sql--1.3.sql
SET LOCAL search_path = public;
SELECT plan(3);

SELECT setseed(0.29);
CREATE TEMP TABLE limiters (name text, policy boolean, rate double precision, burst integer);
INSERT INTO limiters
SELECT 'explicit_' || i, false, 0, 0 FROM generate_series(1, 6) AS i
UNION ALL
SELECT 'policy_' || i, true, 0, 0 FROM generate_series(1, 4) AS i;

-- a new random limit for every limiter (for a policy: in both editions)
CREATE FUNCTION pg_temp.change_limits() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	l record;
	lockout interval;
	growth double precision;
	shadow boolean;
BEGIN
	UPDATE limiters SET rate = (ARRAY[1000.0, 10.0, 1.0, 1.0 / 3, 1.0 / 60, 0.5, 250000.0, 3.0])[1 + floor(random() * 8)::integer],
					   burst = 1 + floor(random() * 12)::integer;
	FOR l IN SELECT * FROM limiters WHERE policy LOOP
		lockout := CASE WHEN random() < 0.6 THEN (1 + floor(random() * 20)) * interval '1 second' END;
		growth := CASE WHEN lockout IS NOT NULL THEN (ARRAY[1, 1.5, 2, 3.7])[1 + floor(random() * 4)::integer] ELSE 1 END;
		shadow := random() < 0.15;
		DELETE FROM c_ed.rl_policies WHERE limiter = l.name;
		DELETE FROM sql_ed.rl_policies WHERE limiter = l.name;
		INSERT INTO c_ed.rl_policies (limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max)
		VALUES (l.name, l.rate, l.burst, shadow, lockout, growth, CASE WHEN lockout IS NOT NULL THEN lockout * 10 END);
		INSERT INTO sql_ed.rl_policies (limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max)
		VALUES (l.name, l.rate, l.burst, shadow, lockout, growth, CASE WHEN lockout IS NOT NULL THEN lockout * 10 END);
	END LOOP;
END $$;

CREATE TEMP TABLE answers (n integer, c text, sql text);
DO $$
DECLARE
	t timestamptz := '2030-01-01 00:00:00+00';
	l record;
	k text;
	cost integer;
	c c_ed.rl_decision;
	s sql_ed.rl_decision;
BEGIN
	PERFORM pg_temp.change_limits();
	FOR n IN 1 .. 20000 LOOP
		IF n % 1000 = 0 THEN
			PERFORM pg_temp.change_limits();
		END IF;
		t := t + floor(random() * random() * 3000000) * interval '1 microsecond';
		SELECT * INTO l FROM limiters ORDER BY random() LIMIT 1;
		k := 'key_' || floor(random() * 12);
		cost := CASE WHEN random() < 0.1 THEN 0
					 WHEN random() < 0.05 THEN l.burst + 1
					 ELSE 1 + floor(random() * random() * l.burst)::integer END;
		IF l.policy THEN
			c := c_ed.rl_take_at(l.name, k, cost, t);
			s := sql_ed.rl_take_at(l.name, k, cost, t);
		ELSE
			c := c_ed.rl_take_at(l.name, k, l.rate, l.burst, cost, t);
			s := sql_ed.rl_take_at(l.name, k, l.rate, l.burst, cost, t);
		END IF;
		INSERT INTO answers VALUES (n, c::text, s::text);
	END LOOP;
END $$;

SELECT is((SELECT count(*) FROM answers), 20000::bigint, '20 000 decisions');
SELECT is((SELECT string_agg(format('%s: C %s, SQL %s', n, c, sql), '; ' ORDER BY n)
		   FROM (SELECT * FROM answers WHERE c IS DISTINCT FROM sql ORDER BY n LIMIT 5) AS d),
		  NULL, 'the same answers to the microsecond');
SELECT set_eq($$SELECT key, tat, interval_us, lock_until, lock_us FROM c_ed.rl_buckets$$,
			  $$SELECT key, tat, interval_us, lock_until, lock_us FROM sql_ed.rl_buckets$$,
			  'the same buckets');

SELECT * FROM finish();
ROLLBACK;
