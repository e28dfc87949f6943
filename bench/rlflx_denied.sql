-- rate-limiter-flexible's RateLimiterPostgres consume(key, 1): its upsert, the clock in the statement (Date.now() in Node)
-- (a colon inside a literal would be read as a pgbench variable)
INSERT INTO rlflx VALUES ('rlflx:' || 'attacker', 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1000000000)
  ON CONFLICT(key) DO UPDATE SET
    points = CASE WHEN rlflx.expire <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint THEN 1 ELSE rlflx.points + (1) END,
    expire = CASE WHEN rlflx.expire <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1000000000 ELSE rlflx.expire END
RETURNING points, expire;
