-- rl_policies and rl_take(limiter, key, cost) by policy: the table's checks
-- and privileges, decisions by policy, limit changes, shadow mode, errors.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(49);

-- the stored bucket of a key, in either store
CREATE FUNCTION pg_temp.bucket(text, text) RETURNS rl_buckets
LANGUAGE sql AS $$
	SELECT sha256(convert_to($1, 'UTF8') || '\x00'::bytea || convert_to($2, 'UTF8')),
		   tat, interval_us, lock_until, lock_us
	FROM rl_inspect($1, $2) WHERE store IS NOT NULL
$$;

-- the checks refuse what rl_take refuses
SELECT throws_ok(format('INSERT INTO rl_policies VALUES (%s)', v), '23514', NULL,
				 format('rl_policies refuses (%s)', v))
FROM unnest(ARRAY[$$'', 1, 1$$, $$'x', 0, 1$$, $$'x', -1, 1$$, $$'x', 'NaN', 1$$,
				  $$'x', 'Infinity', 1$$, $$'x', 1000000.5, 1$$, $$'x', 1, 0$$]) AS v;
SELECT throws_ok($$INSERT INTO rl_policies VALUES ('x', NULL, 1)$$, '23502', NULL,
				 'rl_policies refuses a NULL rate');
SELECT lives_ok($$INSERT INTO rl_policies VALUES ('edge', 1000000, 1)$$,
				'and accepts the edges: 1000000 per second, burst 1');

-- decisions by policy are the explicit decisions of its rate and burst
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('sign_in', 1.0 / 60, 3);
SELECT is((SELECT shadow FROM rl_policies WHERE limiter = 'sign_in'), false,
		  'a policy enforces by default');
SELECT is(array_agg(d.allowed ORDER BY n), ARRAY[true, true, true, false],
		  'a policy of burst 3 allows 3')
FROM generate_series(1, 4) AS n, LATERAL rl_take('sign_in', 'ada', n - n + 1) AS d;
SELECT ok((SELECT remaining = 0 AND retry_after BETWEEN 50 AND 60 AND reset_after > 170
		   FROM rl_take('sign_in', 'ada')),
		  'a denial by policy: remaining 0, retry_after about one interval of 60 s');
SELECT is((pg_temp.bucket('sign_in', 'ada')).interval_us, 60000000::bigint,
		  'stored at the policy''s T');
SELECT is((SELECT remaining FROM rl_take('sign_in', 'bob', 2)), 1, 'cost by policy');
SELECT is((SELECT remaining FROM rl_take('sign_in', 'bob', 0)), 1, 'a peek by policy');
SELECT ok((SELECT allowed AND remaining = 0 FROM rl_take('sign_in', 'eve', 3)),
		  'the whole burst at once');

-- a changed policy applies at the next call, the fill level carried in cells:
-- 3 of 3 used at 1/60 s are 3 of 30 used at 1/6 s (in time they would be 30)
UPDATE rl_policies SET rate = 1.0 / 6, burst = 30 WHERE limiter = 'sign_in';
SELECT ok((SELECT allowed AND remaining = 26 FROM rl_take('sign_in', 'ada')),
		  'a raised limit: 3 cells carried over, one more taken, 26 left');
SELECT is((pg_temp.bucket('sign_in', 'ada')).interval_us, 6000000::bigint,
		  'and the bucket is stored at the new T');
UPDATE rl_policies SET rate = 1.0 / 60, burst = 2 WHERE limiter = 'sign_in';
SELECT ok((SELECT NOT allowed AND remaining = 0 FROM rl_take('sign_in', 'ada')),
		  'a lowered limit: capped at the new burst, denied');
SELECT is((pg_temp.bucket('sign_in', 'ada')).interval_us, 60000000::bigint,
		  'and the denial stored the normalised bucket');
DELETE FROM rl_policies WHERE limiter = 'sign_in';
SELECT throws_ok($$SELECT rl_take('sign_in', 'ada')$$, '42704',
				 'limiter "sign_in" has no policy', 'a deleted policy is unknown at once');

-- shadow: decides and stores as enforced, answers allowed
INSERT INTO rl_policies VALUES ('new_limit', 1.0 / 60, 2, true);
SELECT is(array_agg(row(d.allowed, d.remaining, d.retry_after)::text ORDER BY n),
		  ARRAY['(t,1,0)', '(t,0,0)', '(t,0,0)'],
		  'a shadow policy never denies, and reports remaining as decided')
FROM generate_series(1, 3) AS n, LATERAL rl_take('new_limit', 'ada', n - n + 1) AS d;
CREATE TEMP TABLE shadow_before AS SELECT * FROM pg_temp.bucket('new_limit', 'ada');
SELECT ok((SELECT allowed AND retry_after = 0 AND reset_after > 110
		   FROM rl_take('new_limit', 'ada', 5)),
		  'not even a cost above its burst');
SELECT is((SELECT row(b.*)::text FROM pg_temp.bucket('new_limit', 'ada') b),
		  (SELECT row(b.*)::text FROM shadow_before b),
		  'its would-be denials spend nothing, as enforced ones would not');
UPDATE rl_policies SET shadow = false WHERE limiter = 'new_limit';
SELECT ok((SELECT NOT allowed FROM rl_take('new_limit', 'ada')),
		  'enforced, the same bucket denies: shadow mode stored the spending');
SELECT ok((rl_take('new_limit', 'ada', 0)).allowed, 'an enforced peek is allowed');
SELECT throws_ok($$SELECT rl_take('new_limit', 'ada', 1, 5)$$, '42501', NULL,
				 'a policy binds its limiter: the explicit form is refused (test/pgtap/policy_rule.sql)');

-- errors: class 22 naming the argument, 42704 naming the limiter
CREATE TEMP TABLE before AS SELECT key, tat, interval_us, xmin::text AS x FROM rl_buckets;
INSERT INTO rl_policies VALUES ('slow', 1e-6, 2147483647);
SELECT throws_ok($$SELECT rl_take(NULL::text, 'ada')$$, '22004', 'limiter must not be null', 'NULL limiter');
SELECT throws_ok($$SELECT rl_take('new_limit', NULL)$$, '22004', 'key must not be null', 'NULL key');
SELECT throws_ok($$SELECT rl_take('new_limit', 'ada', NULL)$$, '22004', 'cost must not be null', 'NULL cost');
SELECT throws_ok($$SELECT rl_take('', 'ada')$$, '22023', 'limiter must not be empty', 'empty limiter');
SELECT throws_ok($$SELECT rl_take('new_limit', '')$$, '22023', 'key must not be empty', 'empty key');
SELECT throws_ok($$SELECT rl_take('new_limit', 'ada', -1)$$, '22023', 'cost must not be negative', 'negative cost');
SELECT throws_ok($$SELECT rl_take('nobody', 'ada')$$, '42704', 'limiter "nobody" has no policy',
				 'an unknown limiter, named');
SELECT throws_ok($$SELECT rl_take('slow', 'ada')$$, '22023',
				 'burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range',
				 'a policy whose tolerance leaves the time range');
SELECT results_eq($$SELECT key, tat, interval_us, xmin::text FROM rl_buckets ORDER BY key$$,
				  $$SELECT * FROM before ORDER BY key$$, 'no bad call wrote anything');

-- ratelimit.in_transaction covers them all with the table store (the
-- memory store is not transactional); a peek is no trap
SET LOCAL ratelimit.in_transaction = error;
SELECT CASE current_setting('ratelimit.store') WHEN 'table'
	   THEN throws_ok(q, '25001', NULL, q) ELSE lives_ok(q, q) END
FROM unnest(ARRAY[$$SELECT rl_take('new_limit', 'ada')$$,
				  $$SELECT rl_take_all(ARRAY['new_limit'], ARRAY['ada'])$$,
				  $$SELECT rl_take_all(ARRAY['x'], ARRAY['ada'], ARRAY[1.0], ARRAY[1])$$,
				  $$SELECT rl_refund('new_limit', 'ada')$$]) AS q;
SELECT lives_ok($$SELECT rl_take('new_limit', 'ada', 0)$$, 'a peek by policy is no trap');
SELECT lives_ok($$SELECT rl_take_all(ARRAY['new_limit'], ARRAY['ada'], ARRAY[0])$$,
				'nor a call of peeks');
SET LOCAL ratelimit.in_transaction = allow;

-- any role reads the policies and decides by them; only the owner writes
CREATE ROLE rl_test_policy_app;
GRANT USAGE ON SCHEMA public TO rl_test_policy_app;
SET LOCAL ROLE rl_test_policy_app;
SELECT is((SELECT rate FROM rl_policies WHERE limiter = 'new_limit'), 1.0::float8 / 60,
		  'PUBLIC reads rl_policies');
SELECT throws_ok(q, '42501', 'permission denied for table rl_policies', q)
FROM unnest(ARRAY[$$INSERT INTO rl_policies VALUES ('mine', 1000, 1000)$$,
				  $$UPDATE rl_policies SET burst = 1000$$,
				  $$DELETE FROM rl_policies$$,
				  $$TRUNCATE rl_policies$$]) AS q;
SELECT ok((rl_take('edge', 'app')).allowed, 'PUBLIC decides by policy');
RESET ROLE;

-- any search_path
SET LOCAL search_path = '';
CREATE TEMP TABLE empty_path AS SELECT * FROM public.rl_take('edge', 'path');
RESET search_path;
SELECT ok((SELECT allowed FROM empty_path), 'a decision by policy under an empty search_path');

SELECT * FROM finish();
ROLLBACK;
