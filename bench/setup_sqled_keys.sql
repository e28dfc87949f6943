-- Run by the owner after the SQL edition's install: warm every key of the
-- spread runs and exhaust the denied key, as bench/setup.sql does for the C
-- table store.
SELECT count(*) FROM (SELECT rl_take('spread', 'user' || k, 10, 100) FROM generate_series(1, 100000) AS k) s;
SELECT rl_take('denied', 'attacker', 0.000001, 1);
VACUUM ANALYZE rl_buckets;
