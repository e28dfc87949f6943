-- Decisions as a user sees them, at fixed times through rl_take_at.

-- 10 sign-ins per 15 minutes, burst 3: one every 90 s once the burst is spent
SELECT * FROM rl_take_at('auth_login', 'ada@example.com', 10.0 / 900, 3, 1, '2030-01-01 12:00:00+00');
SELECT * FROM rl_take_at('auth_login', 'ada@example.com', 10.0 / 900, 3, 1, '2030-01-01 12:00:01+00');
SELECT * FROM rl_take_at('auth_login', 'ada@example.com', 10.0 / 900, 3, 1, '2030-01-01 12:00:02+00');
SELECT * FROM rl_take_at('auth_login', 'ada@example.com', 10.0 / 900, 3, 1, '2030-01-01 12:00:03+00');
-- 87 s later one cell is free again
SELECT * FROM rl_take_at('auth_login', 'ada@example.com', 10.0 / 900, 3, 1, '2030-01-01 12:01:30+00');
-- the same key under another limiter keeps its own budget
SELECT * FROM rl_take_at('password_reset', 'ada@example.com', 10.0 / 900, 3, 1, '2030-01-01 12:01:30+00');
-- cost: an expensive request takes several cells; cost above burst never passes
SELECT * FROM rl_take_at('export', 'team-7', 1, 5, 4, '2030-01-01 12:00:00+00');
SELECT * FROM rl_take_at('export', 'team-7', 1, 5, 2, '2030-01-01 12:00:00+00');
SELECT * FROM rl_take_at('export', 'team-7', 1, 5, 6, '2030-01-01 12:00:00+00');
-- cost 0 peeks without spending
SELECT * FROM rl_take_at('export', 'team-7', 1, 5, 0, '2030-01-01 12:00:02+00');
-- raising the limit carries the fill level over in cells: 4 of 5 used becomes 4 of 50
SELECT * FROM rl_take_at('export', 'team-7', 10, 50, 1, '2030-01-01 12:00:00+00');
SELECT coalesce(memory_used, 0) + table_buckets AS buckets FROM rl_store_status();
SELECT rl_reset('export', 'team-7') AS removed, rl_reset('export', 'team-7') AS removed_again;


-- above 1000/s the interval is whole microseconds: 600 000/s acts as 500 000/s
SELECT * FROM rl_take_at('fast', 'k', 600000, 1, 1, '2030-01-01 12:00:00+00');
SELECT * FROM rl_take_at('fast', 'k', 600000, 1, 1, '2030-01-01 12:00:00+00');
