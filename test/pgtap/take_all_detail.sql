-- rl_take_all_detail: rl_take_all's answer, and each request's own decision
-- in the order of the arrays (its bucket after the call: unspent when the
-- call is denied), by explicit limits and by policies, shadow included.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(32);

-- a slow rate: seconds of test time change no cell
CREATE FUNCTION pg_temp.detail(keys text[], bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_detail LANGUAGE sql AS $$
	SELECT * FROM rl_take_all_detail(array_fill('detail'::text, ARRAY[cardinality(keys)]), keys,
									 array_fill(1.0 / 3600, ARRAY[cardinality(keys)]), bursts, costs)
$$;
CREATE FUNCTION pg_temp.all_of(keys text[], bursts integer[], costs integer[] DEFAULT NULL)
RETURNS rl_decision_all LANGUAGE sql AS $$
	SELECT * FROM rl_take_all(array_fill('all'::text, ARRAY[cardinality(keys)]), keys,
							  array_fill(1.0 / 3600, ARRAY[cardinality(keys)]), bursts, costs)
$$;
-- what a peek of one key reports now
CREATE FUNCTION pg_temp.peek(limiter text, key text, burst integer) RETURNS rl_decision
LANGUAGE sql AS $$ SELECT * FROM rl_take(limiter, key, 1.0 / 3600, burst, 0) $$;
-- two answers alike: the same verdicts and cells, times within a second
CREATE FUNCTION pg_temp.alike(a rl_decision, b rl_decision) RETURNS boolean
LANGUAGE sql AS $$
	SELECT a.allowed = b.allowed AND a.remaining = b.remaining
		   AND (a.retry_after IS NULL) = (b.retry_after IS NULL)
		   AND abs(coalesce(a.retry_after - b.retry_after, 0)) < 1
		   AND abs(a.reset_after - b.reset_after) < 1
$$;
-- the rl_decision_all part of a detailed answer
CREATE FUNCTION pg_temp.combined(d rl_decision_detail) RETURNS rl_decision_all
LANGUAGE sql AS $$ SELECT (d.allowed, d.remaining, d.retry_after, d.reset_after, d.limiter)::rl_decision_all $$;
CREATE FUNCTION pg_temp.alike_all(a rl_decision_all, b rl_decision_all) RETURNS boolean
LANGUAGE sql AS $$
	SELECT pg_temp.alike((a.allowed, a.remaining, a.retry_after, a.reset_after),
						 (b.allowed, b.remaining, b.retry_after, b.reset_after))
		   AND a.limiter = replace(b.limiter, 'all', 'detail')
$$;

SELECT has_type('rl_decision_detail');
SELECT has_function('rl_take_all_detail', ARRAY['text[]', 'text[]', 'integer[]']);
SELECT has_function('rl_take_all_detail',
					ARRAY['text[]', 'text[]', 'double precision[]', 'integer[]', 'integer[]']);
SELECT ok(has_function_privilege('public', 'rl_take_all_detail(text[], text[], integer[])', 'EXECUTE')
		  AND has_function_privilege('public', 'rl_take_all_detail(text[], text[], double precision[], integer[], integer[])', 'EXECUTE'),
		  'any role may call both forms');

-- allowed: the combined answer is rl_take_all's; each request reports its
-- bucket as a peek of it does afterwards, in the order of the arrays
CREATE TEMP TABLE d AS SELECT * FROM pg_temp.detail(ARRAY['a', 'b', 'c'], ARRAY[5, 3, 4]);
SELECT ok(pg_temp.alike_all(pg_temp.combined(ROW(d.*)::rl_decision_detail), pg_temp.all_of(ARRAY['a', 'b', 'c'], ARRAY[5, 3, 4])),
		  'allowed: the first five columns are rl_take_all''s answer')
FROM d;
SELECT is((SELECT cardinality(requests) FROM d), 3, 'one decision per request');
SELECT is((SELECT array_agg(r.remaining ORDER BY i) FROM d, unnest(d.requests) WITH ORDINALITY AS r(a, remaining, t, z, i)),
		  ARRAY[4, 2, 3], 'each request''s remaining, in the order of the arrays');
SELECT ok(bool_and(r.allowed AND r.retry_after = 0), 'each one allowed, retry_after 0')
FROM d, unnest(d.requests) AS r;
SELECT ok(pg_temp.alike(d.requests[1], pg_temp.peek('detail', 'a', 5))
		  AND pg_temp.alike(d.requests[2], pg_temp.peek('detail', 'b', 3))
		  AND pg_temp.alike(d.requests[3], pg_temp.peek('detail', 'c', 4)),
		  'each request is its bucket after the call, as a peek reads it')
FROM d;
SELECT ok(abs(d.requests[1].reset_after - 3600) < 1 AND abs(d.requests[2].reset_after - 3600) < 1,
		  'each request''s own reset_after')
FROM d;

-- denied by b: nothing spent; b reports its denial, a and c their unspent buckets
SELECT pg_temp.detail(ARRAY['b'], ARRAY[3], ARRAY[2]);
SELECT pg_temp.all_of(ARRAY['b'], ARRAY[3], ARRAY[2]);
DROP TABLE d;
CREATE TEMP TABLE d AS SELECT * FROM pg_temp.detail(ARRAY['a', 'b', 'c'], ARRAY[5, 3, 4]);
SELECT ok(NOT allowed AND limiter = 'detail', 'denied: b is spent') FROM d;
SELECT ok(pg_temp.alike_all(pg_temp.combined(ROW(d.*)::rl_decision_detail), pg_temp.all_of(ARRAY['a', 'b', 'c'], ARRAY[5, 3, 4])),
		  'denied: the first five columns are rl_take_all''s answer')
FROM d;
SELECT ok(NOT (d.requests[2]).allowed AND (d.requests[2]).remaining = 0
		  AND abs((d.requests[2]).retry_after - 3600) < 1
		  AND abs((d.requests[2]).reset_after - 3 * 3600) < 1,
		  'the denied request: its own retry_after and reset_after')
FROM d;
SELECT ok((d.requests[1]).allowed AND (d.requests[1]).retry_after = 0 AND (d.requests[1]).remaining = 4,
		  'an allowed request of a denied call: allowed on its own, nothing spent')
FROM d;
SELECT ok(pg_temp.alike(d.requests[1], pg_temp.peek('detail', 'a', 5))
		  AND pg_temp.alike(d.requests[3], pg_temp.peek('detail', 'c', 4)),
		  'and its bucket unspent, as a peek reads it')
FROM d;

-- a cost above the burst: never allowed, no retry_after
DROP TABLE d;
CREATE TEMP TABLE d AS SELECT * FROM pg_temp.detail(ARRAY['d', 'e'], ARRAY[5, 3], ARRAY[1, 4]);
SELECT ok(NOT allowed AND retry_after IS NULL, 'a cost above the burst denies, retry_after NULL') FROM d;
SELECT ok(NOT (d.requests[2]).allowed AND (d.requests[2]).retry_after IS NULL
		  AND (d.requests[1]).allowed AND (d.requests[1]).remaining = 5,
		  'its request says so; the other spent nothing')
FROM d;

-- peeks: allowed, each reports, nothing written
DROP TABLE d;
CREATE TEMP TABLE d AS SELECT * FROM pg_temp.detail(ARRAY['a', 'fresh'], ARRAY[5, 2], ARRAY[0, 0]);
SELECT ok(allowed AND (requests[1]).remaining = 4 AND (requests[2]).remaining = 2
		  AND (requests[2]).reset_after = 0,
		  'peeks: each request''s remaining, an absent key full')
FROM d;
SELECT is((SELECT store FROM rl_inspect('detail', 'fresh')), NULL, 'a peek writes nothing');

-- by policy, shadow included: a shadow request reports allowed, as rl_take does
INSERT INTO rl_policies VALUES ('detail_enforced', 1.0 / 3600, 2, false), ('detail_shadow', 1.0 / 3600, 1, true);
SELECT rl_take_all_detail(ARRAY['detail_shadow'], ARRAY['k']);
DROP TABLE d;
CREATE TEMP TABLE d AS
SELECT * FROM rl_take_all_detail(ARRAY['detail_enforced', 'detail_shadow'], ARRAY['k', 'k']);
SELECT ok(allowed AND remaining = 0, 'by policy: the shadow''s would-be denial denies nothing') FROM d;
SELECT ok((requests[2]).allowed AND (requests[2]).retry_after = 0 AND (requests[2]).remaining = 0,
		  'the shadow request answers allowed, with its remaining')
FROM d;
SELECT ok(pg_temp.alike(requests[2], (SELECT (t.allowed, t.remaining, t.retry_after, t.reset_after)::rl_decision
									  FROM rl_take('detail_shadow', 'k', 0) t)),
		  'as rl_take answers the shadow limiter')
FROM d;
SELECT is((SELECT (requests[1]).remaining FROM d), 1, 'the enforced request spent one cell');
SELECT is(allowed, false, 'the enforced request, spent, denies the call')
FROM rl_take_all_detail(ARRAY['detail_enforced', 'detail_shadow'], ARRAY['k', 'k'], ARRAY[2, 1]);

-- the errors of rl_take_all, naming this function
SELECT throws_ok($$SELECT rl_take_all_detail(ARRAY['detail_enforced'], ARRAY['k'], ARRAY[1.0], ARRAY[5])$$,
				 '42501', NULL, 'the explicit form refuses a limiter with a policy');
CREATE FUNCTION pg_temp.error_of(sql text, OUT state text, OUT message text, OUT hint text, OUT context text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
							hint = PG_EXCEPTION_HINT, context = PG_EXCEPTION_CONTEXT;
END;
$$;
SELECT matches((pg_temp.error_of($$SELECT rl_take_all_detail(ARRAY['detail_enforced'], ARRAY['k'], ARRAY[1.0], ARRAY[5])$$)).hint,
			   'rl_take_all_detail\(limiters, keys, costs\)', 'its hint names the policy form of this function');
SELECT throws_ok($$SELECT rl_take_all_detail(ARRAY['detail', NULL], ARRAY['k', 'l'], ARRAY[1.0, 1.0], ARRAY[5, 5])$$,
				 '22004', NULL, 'a NULL element');
SELECT throws_ok($$SELECT rl_take_all_detail(ARRAY['detail', 'detail'], ARRAY['k', 'k'], ARRAY[1.0, 1.0], ARRAY[5, 5])$$,
				 '22023', NULL, 'the same pair twice');
SELECT throws_ok($$SELECT rl_take_all_detail(ARRAY['detail'], ARRAY['k'], ARRAY[1.0], ARRAY[0])$$,
				 '22023', NULL, 'a bad burst');
SELECT matches((pg_temp.error_of($$SELECT rl_take_all_detail(ARRAY['detail_enforced', 'nope'], ARRAY['k', 'k'])$$)).context,
			   'element 2 of the arrays of rl_take_all_detail', 'an unknown policy names its element');
SELECT is((pg_temp.error_of($$SELECT rl_take_all_detail(ARRAY['detail_enforced', 'nope'], ARRAY['k', 'k'])$$)).state,
		  '42704', 'an unknown policy: 42704');
SELECT is((SELECT store FROM rl_inspect('detail', 'untouched')), NULL, 'a refused call writes nothing')
FROM (SELECT pg_temp.error_of($$SELECT rl_take_all_detail(ARRAY['detail', 'detail'], ARRAY['untouched', 'x'],
															 ARRAY[1.0, 1.0], ARRAY[5, -1])$$)) e;

SELECT * FROM finish();
ROLLBACK;
