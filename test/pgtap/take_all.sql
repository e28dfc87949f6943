-- rl_take_all: all or nothing, the combined answer, peeks, normalisation
-- writes on a denial, shadow policies, and every bad input.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(50);

-- the stored bucket of a key, in either store
CREATE FUNCTION pg_temp.bucket(text, text) RETURNS rl_buckets
LANGUAGE sql AS $$
	SELECT sha256(convert_to($1, 'UTF8') || '\x00'::bytea || convert_to($2, 'UTF8')),
		   tat, interval_us, lock_until, lock_us
	FROM rl_inspect($1, $2) WHERE store IS NOT NULL
$$;
-- a slow rate: seconds of test time change no cell
CREATE FUNCTION pg_temp.take(limiters text[], bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all LANGUAGE sql AS $$
	SELECT * FROM rl_take_all(limiters, array_fill('k'::text, ARRAY[cardinality(limiters)]),
							  array_fill(1.0 / 3600, ARRAY[cardinality(limiters)]), bursts, costs)
$$;

-- allowed: everything spent; remaining the least, reset_after the largest
CREATE TEMP TABLE d AS SELECT * FROM pg_temp.take(ARRAY['ip', 'account'], ARRAY[5, 3]);
SELECT ok((SELECT allowed AND retry_after = 0 FROM d), 'both allowed: allowed, retry_after 0');
SELECT is((SELECT remaining FROM d), 2, 'remaining the least of 4 and 2');
SELECT is((SELECT limiter FROM d), 'account', 'the binding limiter has the least remaining');
SELECT ok((SELECT reset_after BETWEEN 3590 AND 3600 FROM d), 'reset_after the largest');
SELECT ok((pg_temp.bucket('ip', 'k')).tat > now() + interval '59 minutes'
		  AND (pg_temp.bucket('account', 'k')).tat > now() + interval '59 minutes',
		  'both buckets spent');
SELECT is((SELECT limiter FROM pg_temp.take(ARRAY['tie_a', 'tie_b'], ARRAY[3, 3])), 'tie_a',
		  'allowed, remaining tied: the first in the array binds');
SELECT is((SELECT limiter FROM pg_temp.take(ARRAY['peek', 'account'], ARRAY[5, 3], ARRAY[0, 0])),
		  'account', 'peeks are allowed and report');
SELECT ok(pg_temp.bucket('peek', 'k') IS NULL, 'a peek writes nothing');

-- denied: nothing spent anywhere
SELECT pg_temp.take(ARRAY['account'], ARRAY[3], ARRAY[2]);
CREATE TEMP TABLE ip_before AS SELECT * FROM pg_temp.bucket('ip', 'k');
DROP TABLE d;
CREATE TEMP TABLE d AS SELECT * FROM pg_temp.take(ARRAY['ip', 'account'], ARRAY[5, 3]);
SELECT ok((SELECT NOT allowed FROM d), 'the account is spent: denied');
SELECT is((SELECT limiter FROM d), 'account', 'the account binds');
SELECT is((SELECT remaining FROM d), 0, 'remaining the least');
SELECT ok((SELECT retry_after BETWEEN 3590 AND 3600 FROM d), 'retry_after the denied one''s');
SELECT ok((SELECT reset_after BETWEEN 3 * 3590 AND 3 * 3600 FROM d), 'reset_after the largest');
SELECT is((SELECT row(b.*)::text FROM pg_temp.bucket('ip', 'k') b),
		  (SELECT row(b.*)::text FROM ip_before b), 'the allowed ip spent nothing');
SELECT ok(pg_temp.bucket('fresh', 'k') IS NULL AND NOT d.allowed, 'nor wrote an absent bucket')
FROM pg_temp.take(ARRAY['fresh', 'account'], ARRAY[5, 3]) AS d;

-- denied ones: the largest retry_after binds, an unknown one first, ties the first
SELECT pg_temp.take(ARRAY['one_left', 'two_left', 'two_left_too'], ARRAY[3, 3, 3], ARRAY[2, 1, 1]);
DROP TABLE d;
CREATE TEMP TABLE d AS
SELECT * FROM pg_temp.take(ARRAY['two_left', 'one_left', 'two_left_too'], ARRAY[3, 3, 3], ARRAY[3, 3, 3]);
SELECT ok((SELECT NOT allowed AND retry_after BETWEEN 2 * 3590 AND 2 * 3600 FROM d),
		  'retry_after the largest among the denied');
SELECT is((SELECT limiter FROM d), 'one_left', 'the one with the largest retry_after binds');
SELECT is((SELECT limiter FROM pg_temp.take(ARRAY['two_left', 'two_left_too'], ARRAY[3, 3], ARRAY[3, 3])),
		  'two_left', 'denied, retry_after tied: the first binds');
DROP TABLE d;
CREATE TEMP TABLE d AS
SELECT * FROM pg_temp.take(ARRAY['one_left', 'ip', 'huge'], ARRAY[3, 5, 3], ARRAY[3, 1, 4]);
SELECT ok((SELECT NOT allowed AND retry_after IS NULL FROM d),
		  'a denied cost above its burst: retry_after NULL');
SELECT is((SELECT limiter FROM d), 'huge', 'and it binds before a larger finite one');
SELECT is((SELECT limiter FROM pg_temp.take(ARRAY['a_huge', 'b_huge'], ARRAY[1, 1], ARRAY[2, 2])),
		  'a_huge', 'two above their bursts: the first binds');

-- a denial still writes the normalisation of a live bucket
SELECT rl_take('norm', 'k', 1.0 / 3600, 10, 4);
SELECT results_eq(
	$$SELECT allowed, limiter FROM rl_take_all(ARRAY['norm', 'account'], ARRAY['k', 'k'],
											   ARRAY[1.0 / 1800, 1.0 / 3600], ARRAY[10, 3])$$,
	$$VALUES (false, 'account'::text)$$, 'denied by the account');
SELECT is((pg_temp.bucket('norm', 'k')).interval_us, 1800000000::bigint,
		  'the changed limit of the other bucket was stored on the denial');
SELECT ok((pg_temp.bucket('norm', 'k')).tat BETWEEN now() + interval '7190 s' AND clock_timestamp() + interval '7200 s',
		  'its debt of 4 cells carried over, nothing spent');

-- shadow policies: decided and stored, never deny
INSERT INTO rl_policies VALUES ('p_ip', 1.0 / 3600, 2, false), ('p_new', 1.0 / 3600, 1, true);
SELECT ok((SELECT allowed FROM rl_take_all(ARRAY['p_ip', 'p_new'], ARRAY['k', 'k'])),
		  'by policy: allowed');
DROP TABLE d;
CREATE TEMP TABLE d AS SELECT * FROM rl_take_all(ARRAY['p_ip', 'p_new'], ARRAY['k', 'k']);
SELECT ok((SELECT allowed AND retry_after = 0 AND remaining = 0 FROM d),
		  'a shadow policy''s denial denies nothing; its remaining counts');
SELECT ok((pg_temp.bucket('p_ip', 'k')).tat > now() + interval '7190 s',
		  'the enforced one spent');
SELECT ok((SELECT NOT allowed AND limiter = 'p_ip' AND retry_after > 0
		   FROM rl_take_all(ARRAY['p_new', 'p_ip'], ARRAY['k', 'k'])),
		  'an enforced denial denies, and binds');
SELECT ok((SELECT allowed FROM rl_take_all(ARRAY['p_ip', 'p_new'], ARRAY['other', 'k'], ARRAY[0, 1])),
		  'costs by policy');

-- errors: class 22 naming the argument, 42704 naming the limiter, nothing written
CREATE TEMP TABLE before AS SELECT key, tat, interval_us, xmin::text AS x FROM rl_buckets;
CREATE FUNCTION pg_temp.bad(call text, state text, message text) RETURNS SETOF text
LANGUAGE sql AS $$
	SELECT throws_ok(call, state, message, format('%s: %s', call, message))
$$;
SELECT pg_temp.bad(q, s, m) FROM (VALUES
	($$SELECT rl_take_all(NULL, ARRAY['k'], ARRAY[1.0], ARRAY[1])$$, '22004', 'limiters must not be null'),
	($$SELECT rl_take_all(ARRAY['a'], NULL, ARRAY[1.0], ARRAY[1])$$, '22004', 'keys must not be null'),
	($$SELECT rl_take_all(ARRAY['a'], ARRAY['k'], NULL, ARRAY[1])$$, '22004', 'rates must not be null'),
	($$SELECT rl_take_all(ARRAY['a'], ARRAY['k'], ARRAY[1.0], NULL)$$, '22004', 'bursts must not be null'),
	($$SELECT rl_take_all(ARRAY['a', NULL], ARRAY['k', 'k'], ARRAY[1.0, 1], ARRAY[1, 1])$$, '22004', 'limiters must not contain NULL'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', NULL], ARRAY[1.0, 1], ARRAY[1, 1])$$, '22004', 'keys must not contain NULL'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', 'k'], ARRAY[1.0, 1], ARRAY[1, 1], ARRAY[1, NULL])$$, '22004', 'costs must not contain NULL'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k'], ARRAY[1.0, 1], ARRAY[1, 1])$$, '22023', 'keys must have as many elements as limiters'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', 'k'], ARRAY[1.0], ARRAY[1, 1])$$, '22023', 'rates must have as many elements as limiters'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', 'k'], ARRAY[1.0, 1], ARRAY[1, 1], ARRAY[1, 1, 1])$$, '22023', 'costs must have as many elements as limiters'),
	($$SELECT rl_take_all(ARRAY[]::text[], ARRAY[]::text[])$$, '22023', 'limiters must have 1 to 16 elements'),
	($$SELECT rl_take_all(array_agg('l' || i), array_agg('k'::text)) FROM generate_series(1, 17) i$$, '22023', 'limiters must have 1 to 16 elements'),
	($$SELECT rl_take_all(ARRAY['a', ''], ARRAY['k', 'k'], ARRAY[1.0, 1], ARRAY[1, 1])$$, '22023', 'limiters must not contain an empty string'),
	($$SELECT rl_take_all(ARRAY['a', 'a'], ARRAY['k', 'k'], ARRAY[1.0, 2], ARRAY[1, 2])$$, '22023', 'limiters and keys must not name the same pair twice'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', 'k'], ARRAY[1.0, 0], ARRAY[1, 1])$$, '22023', 'rate must be a finite number of requests per second above 0 and at most 1000000'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', 'k'], ARRAY[1.0, 1], ARRAY[1, 0])$$, '22023', 'burst must be at least 1'),
	($$SELECT rl_take_all(ARRAY['a', 'b'], ARRAY['k', 'k'], ARRAY[1.0, 1], ARRAY[1, 1], ARRAY[1, -1])$$, '22023', 'cost must not be negative'),
	($$SELECT rl_take_all(ARRAY['p_ip', 'nobody'], ARRAY['k', 'k'])$$, '42704', 'limiter "nobody" has no policy')
) AS t(q, s, m);
SELECT results_eq($$SELECT key, tat, interval_us, xmin::text FROM rl_buckets ORDER BY key$$,
				  $$SELECT * FROM before ORDER BY key$$, 'no bad call wrote anything');
SELECT lives_ok($$SELECT rl_take_all(array_agg('l' || i), array_agg('k'::text),
									 array_agg(1.0::float8), array_agg(1)) FROM generate_series(1, 16) i$$,
				'16 entries are accepted');

-- any search_path
SET LOCAL search_path = '';
CREATE TEMP TABLE empty_path AS SELECT * FROM public.rl_take_all(ARRAY['p_ip'], ARRAY['path']);
RESET search_path;
SELECT ok((SELECT allowed FROM empty_path), 'rl_take_all under an empty search_path');

SELECT * FROM finish();
ROLLBACK;
