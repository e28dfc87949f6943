\set k random(1, 100000)
SELECT * FROM rl_take('pair_ip', 'ip' || :k, 10, 100);
SELECT * FROM rl_take('pair_account', 'user' || :k, 10, 100);
