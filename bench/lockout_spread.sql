\set k random(1, 100000)
SELECT * FROM rl_take('spread_lockout', 'user' || :k);
