SELECT * FROM rl_floor('denied', 'attacker', 0.000001, 1);
