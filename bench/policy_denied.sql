SELECT * FROM rl_take('denied_policy', 'attacker', 2);
