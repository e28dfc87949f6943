\set k random(1, 100000)
SELECT * FROM rl_take('spread_durable', 'user' || :k);
