SELECT * FROM rl_floor('hot', 'one key', 1000000, 1000000);
