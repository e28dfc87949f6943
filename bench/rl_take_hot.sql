SELECT * FROM rl_take('hot', 'one key', 1000000, 1000000);
