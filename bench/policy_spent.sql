SELECT * FROM rl_take('spent_policy', 'attacker');
