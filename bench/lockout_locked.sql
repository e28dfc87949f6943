SELECT * FROM rl_take('locked_lockout', 'attacker');
