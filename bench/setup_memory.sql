-- Objects for the memory store server of bench/run: the spread keys warm in
-- memory and the denied key exhausted, as setup.sql does for the table store.
CREATE EXTENSION ratelimit;
SELECT count(*) FROM (SELECT rl_take('spread', 'user' || k, 10, 100) FROM generate_series(1, 100000) AS k) s;
SELECT rl_take('denied', 'attacker', 0.000001, 1);
-- the policy call, under a limiter name of its own, as in setup.sql
INSERT INTO rl_policies VALUES ('spread_policy', 10, 100);
SELECT count(*) FROM (SELECT rl_take('spread_policy', 'user' || k) FROM generate_series(1, 100000) AS k) s;
