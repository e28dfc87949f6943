-- From the SQL edition in schema public to the C extension in schema
-- ratelimit_c: its policies and both tables of buckets, which have the same
-- columns and keys in both.
CREATE SCHEMA ratelimit_c;
CREATE EXTENSION ratelimit SCHEMA ratelimit_c;
INSERT INTO ratelimit_c.rl_policies (limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max, durable)
SELECT limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max, durable FROM public.rl_policies;
INSERT INTO ratelimit_c.rl_buckets (key, tat, interval_us, lock_until, lock_us)
SELECT key, tat, interval_us, lock_until, lock_us FROM public.rl_buckets;
INSERT INTO ratelimit_c.rl_buckets_durable (key, tat, interval_us, lock_until, lock_us)
SELECT key, tat, interval_us, lock_until, lock_us FROM public.rl_buckets_durable;
