\set k random(1, 100000)
SELECT * FROM rl_floor('spread', 'user' || :k, 10, 100);
