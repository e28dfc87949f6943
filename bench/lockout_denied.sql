SELECT * FROM rl_take('denied_lockout', 'attacker', 2);
