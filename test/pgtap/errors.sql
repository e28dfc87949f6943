-- Every bad input of the contract, one by one: an ERROR in SQLSTATE class 22
-- whose message names the argument, and rl_buckets unchanged afterwards.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(32);

-- a live bucket on the key the bad calls name, so a write would show
CREATE TEMP TABLE seeded AS
SELECT * FROM rl_take_at('login', 'ada', 1, 5, 1, '2030-01-01 00:00:00+00');
CREATE TEMP TABLE before AS
SELECT key, tat, interval_us, xmin::text AS row_xmin, ctid::text AS row_ctid FROM rl_buckets;

CREATE FUNCTION pg_temp.bad(call text, state text, message text) RETURNS SETOF text
LANGUAGE sql AS $$
	SELECT throws_ok(call, state, message, format('%s: %s', call, message))
$$;

SELECT pg_temp.bad($$SELECT rl_take(NULL, 'ada', 1, 5)$$, '22004', 'limiter must not be null');
SELECT pg_temp.bad($$SELECT rl_take('login', NULL, 1, 5)$$, '22004', 'key must not be null');
SELECT pg_temp.bad($$SELECT rl_take('login', 'ada', NULL, 5)$$, '22004', 'rate must not be null');
SELECT pg_temp.bad($$SELECT rl_take('login', 'ada', 1, NULL)$$, '22004', 'burst must not be null');
SELECT pg_temp.bad($$SELECT rl_take('login', 'ada', 1, 5, NULL)$$, '22004', 'cost must not be null');
SELECT pg_temp.bad($$SELECT rl_take_at('login', 'ada', 1, 5, 1, NULL)$$, '22004', 'at must not be null');
SELECT pg_temp.bad($$SELECT rl_take('', 'ada', 1, 5)$$, '22023', 'limiter must not be empty');
SELECT pg_temp.bad($$SELECT rl_take('login', '', 1, 5)$$, '22023', 'key must not be empty');

SELECT pg_temp.bad(format($$SELECT rl_take('login', 'ada', %s, 5)$$, r), '22023',
				   'rate must be a finite number of requests per second above 0 and at most 1000000')
FROM unnest(ARRAY['0', '-1', '''NaN''', '''Infinity''', '''-Infinity''', '1000000.5', '-0.0']) AS r;

-- the hint names integer division, the usual way to a rate of 0
CREATE FUNCTION pg_temp.hint_of(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	hint text;
BEGIN
	EXECUTE call;
	RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
	GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
	RETURN hint;
END $$;
SELECT is(pg_temp.hint_of($$SELECT rl_take('login', 'ada', 5/60, 5)$$),
		  'A rate is in requests per second, and 5/60 divides integers (0): write 5.0/60.',
		  'a rate of 0 (5/60) hints at integer division');

SELECT pg_temp.bad(format($$SELECT rl_take('login', 'ada', 1, %s)$$, b), '22023',
				   'burst must be at least 1')
FROM unnest(ARRAY['0', '-5', '-2147483648']) AS b;

SELECT pg_temp.bad(format($$SELECT rl_take('login', 'ada', 1, 5, %s)$$, c), '22023',
				   'cost must not be negative')
FROM unnest(ARRAY['-1', '-2147483648']) AS c;

SELECT pg_temp.bad(q, '22023',
				   'burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range')
FROM unnest(ARRAY[
	$$SELECT rl_take('login', 'ada', 0.0001, 2147483647)$$,
	$$SELECT rl_take('login', 'ada', 1e-300, 1)$$,
	$$SELECT rl_take_at('login', 'ada', 1, 5, 1, '294276-12-31 23:59:55+00')$$]) AS q;

SELECT pg_temp.bad($$SELECT rl_take_at('login', 'ada', 1, 5, 1, 'infinity')$$, '22023',
				   'at must be a finite timestamp');
SELECT pg_temp.bad($$SELECT rl_take_at('login', 'ada', 1, 5, 1, '-infinity')$$, '22023',
				   'at must be a finite timestamp');
SELECT pg_temp.bad($$SELECT rl_reset(NULL, 'ada')$$, '22004', 'limiter must not be null');
SELECT pg_temp.bad($$SELECT rl_reset('login', NULL)$$, '22004', 'key must not be null');
SELECT pg_temp.bad($$SELECT rl_reset('login', '')$$, '22023', 'key must not be empty');

-- the edges of what is accepted
SELECT lives_ok($$SELECT rl_take_at('edge', 'a', 1000000, 1, 0, '2030-01-01')$$,
				'rate 1000000 per second is accepted');
SELECT lives_ok($$SELECT rl_take_at('edge', 'b', 1, 5, 0, '2030-01-01')$$,
				'cost 0 is accepted');

SELECT results_eq(
	$$SELECT key, tat, interval_us, xmin::text, ctid::text FROM rl_buckets$$,
	$$SELECT key, tat, interval_us, row_xmin, row_ctid FROM before$$,
	'no bad call wrote anything: the table is unchanged, row versions included');

SELECT * FROM finish();
ROLLBACK;
