\set k random(1, 100000)
SELECT * FROM rl_take('spread_policy', 'user' || :k);
