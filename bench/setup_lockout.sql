-- Objects for the lockout workloads of bench/run and bench/profile, on either
-- store: three policies with a lockout beside the same three without one.
-- spread: allowed decisions over the spread keys; denied: a cost above the
-- burst (denied, and no lockout starts); spent / locked: a key out of budget,
-- denied by the plain policy and locked by the one with a lockout.
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES
	('spread_lockout', 10, 100, '1 minute'),
	('denied_policy', 0.000001, 1, NULL),
	('denied_lockout', 0.000001, 1, '1 minute'),
	('spent_policy', 0.000001, 1, NULL),
	('locked_lockout', 0.000001, 1, '366 days');
SELECT count(*) FROM (SELECT rl_take('spread_lockout', 'user' || k) FROM generate_series(1, 100000) AS k) s;
SELECT rl_take('spent_policy', 'attacker'), rl_take('spent_policy', 'attacker');
SELECT rl_take('locked_lockout', 'attacker'), rl_take('locked_lockout', 'attacker');
