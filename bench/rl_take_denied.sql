SELECT * FROM rl_take('denied', 'attacker', 0.000001, 1);
