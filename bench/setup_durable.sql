-- Objects for the durable workloads of bench/run, on either store: the
-- spread policy of setup.sql made durable, its 100 000 keys in
-- rl_buckets_durable, and the floor a durable decision is held to: a
-- primary-key UPDATE of one row of a logged table.
INSERT INTO rl_policies (limiter, rate, burst, durable) VALUES ('spread_durable', 10, 100, true);
SELECT count(*) FROM (SELECT rl_take('spread_durable', 'user' || k) FROM generate_series(1, 100000) AS k) s;
CREATE TABLE floor_row_logged (k integer PRIMARY KEY, v bigint NOT NULL);
INSERT INTO floor_row_logged SELECT k, 0 FROM generate_series(1, 100000) AS k;
VACUUM ANALYZE floor_row_logged, rl_buckets_durable;
