-- The same-shape floor of bench/run (rl_floor.c), created after CREATE
-- EXTENSION ratelimit in the extension's schema, beside rl_take.
CREATE FUNCTION rl_floor(limiter text, key text, rate double precision, burst integer,
						 cost integer DEFAULT 1)
RETURNS rl_decision
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS '$libdir/rl_floor', 'rl_floor';
