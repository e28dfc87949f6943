-- rl_headers, rl_request_ip and rl_guard.  Every expected value is worked
-- out by hand from the design's "Observability and HTTP (1.1)": for a limit
-- of rate r and burst b, T = 1/r seconds, w = max(1, ceil(b / r)), t the
-- seconds until the next cell is back (reset_after mod T, or T when that is
-- 0), Retry-After = ceil(retry_after) and never below t.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;

SELECT plan(62);

-- decisions of real calls, at a fixed clock
CREATE TEMP TABLE at0 AS SELECT '2030-01-01 00:00:00+00'::timestamptz AS t0;
CREATE FUNCTION pg_temp.take(key text, rate float8, burst int, cost int, sec float8)
RETURNS rl_decision LANGUAGE sql AS $$
	SELECT rl_take_at('http', key, rate, burst, cost,
					  (SELECT t0 FROM at0) + make_interval(secs => sec))
$$;

-- allowed: 10 per 15 minutes, T = 90 s
SELECT is(rl_headers(pg_temp.take('a', 10.0 / 900, 10, 1, 0), 'login', 10.0 / 900, 10),
		  '{"RateLimit-Policy": "\"login\";q=10;w=900", "RateLimit": "\"login\";r=9;t=90"}',
		  'allowed, one cell spent: r=9, the cell is back in T');
SELECT is(rl_headers(pg_temp.take('a', 10.0 / 900, 10, 2, 0), 'login', 10.0 / 900, 10)->>'RateLimit',
		  '"login";r=7;t=90', 'three cells spent at once: the first is back in T, not 3T');
SELECT is(rl_headers(pg_temp.take('a', 10.0 / 900, 10, 0, 100), 'login', 10.0 / 900, 10),
		  '{"RateLimit-Policy": "\"login\";q=10;w=900", "RateLimit": "\"login\";r=8;t=80"}',
		  '100 s later (a peek): debt 170 s, 8 left, the next cell in 80 s');
SELECT is(rl_headers(pg_temp.take('a', 10.0 / 900, 10, 0, 100.5), 'login', 10.0 / 900, 10)->>'RateLimit',
		  '"login";r=8;t=80', 'a fraction of a second is rounded up: 79.5 s reads t=80');

-- denied: 1 per second, burst 2
SELECT pg_temp.take('d', 1, 2, 2, 0);
SELECT is(rl_headers(pg_temp.take('d', 1, 2, 1, 0), 'api', 1, 2),
		  '{"RateLimit-Policy": "\"api\";q=2;w=2", "RateLimit": "\"api\";r=0;t=1", "Retry-After": "1"}',
		  'denied: r=0, t=1, Retry-After 1');
SELECT is(rl_headers(pg_temp.take('d', 1, 2, 1, 0.25), 'api', 1, 2),
		  '{"RateLimit-Policy": "\"api\";q=2;w=2", "RateLimit": "\"api\";r=0;t=1", "Retry-After": "1"}',
		  'denied 0.25 s later: 0.75 s rounds up to 1');
SELECT is(rl_headers(pg_temp.take('d', 1, 2, 2, 0.25), 'api', 1, 2)->'Retry-After',
		  '"2"', 'denied at a cost of 2: Retry-After 2 (1.75 rounded up), after t');
SELECT is(rl_headers(ROW(false, 0, 0.2, 5.0)::rl_decision, 'api', 0.1, 10)->'Retry-After',
		  '"5"', 'Retry-After is never earlier than t');
SELECT is(rl_headers(ROW(false, 0, 0.2, 5.0)::rl_decision, 'api', 0.1, 10)->>'RateLimit',
		  '"api";r=0;t=5', '... which is 5 here');

-- never: cost > burst
SELECT is(rl_headers(pg_temp.take('n', 1, 2, 3, 0), 'api', 1, 2),
		  '{"RateLimit-Policy": "\"api\";q=2;w=2", "RateLimit": "\"api\";r=2"}',
		  'never allowed, on a full bucket: no t, no Retry-After');
SELECT pg_temp.take('n', 1, 2, 1, 0);
SELECT is(rl_headers(pg_temp.take('n', 1, 2, 3, 0), 'api', 1, 2),
		  '{"RateLimit-Policy": "\"api\";q=2;w=2", "RateLimit": "\"api\";r=1;t=1"}',
		  'never allowed, one cell spent: t, but no Retry-After');

-- full bucket
SELECT is(rl_headers(pg_temp.take('f', 1, 5, 0, 0), 'api', 1, 5),
		  '{"RateLimit-Policy": "\"api\";q=5;w=5", "RateLimit": "\"api\";r=5"}',
		  'a full bucket: no t');
SELECT is(rl_headers(pg_temp.take('f', 1, 5, 1, 0), 'api', 1, 5)->>'RateLimit',
		  '"api";r=4;t=1', 'one spent');
SELECT is(rl_headers(pg_temp.take('f', 1, 5, 0, 1), 'api', 1, 5)->>'RateLimit',
		  '"api";r=5', 'full again T later: no t');

-- fractional burst / rate
SELECT is(rl_headers(ROW(true, 10, 0, 0)::rl_decision, 'api', 3, 10)->>'RateLimit-Policy',
		  '"api";q=10;w=4', '10 at 3/s: w = ceil(3.33) = 4');
SELECT is(rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'api', 0.3, 1)->>'RateLimit-Policy',
		  '"api";q=1;w=4', '1 at 0.3/s: w = ceil(3.33) = 4');
SELECT is(rl_headers(ROW(true, 3, 0, 0)::rl_decision, 'api', 1.5, 3)->>'RateLimit-Policy',
		  '"api";q=3;w=2', '3 at 1.5/s: w = 2 exactly');
SELECT is(rl_headers(pg_temp.take('q', 3, 10, 1, 0), 'api', 3, 10)->>'RateLimit',
		  '"api";r=9;t=1', '3/s: a cell (T = 333333 us) is back within a second');
SELECT is(rl_headers(pg_temp.take('p', 0.4, 2, 1, 0), 'api', 0.4, 2)->>'RateLimit',
		  '"api";r=1;t=3', '0.4/s: T = 2.5 s reads t=3');
SELECT is(rl_headers(pg_temp.take('p', 0.4, 2, 0, 1), 'api', 0.4, 2)->>'RateLimit',
		  '"api";r=1;t=2', '... 1 s later: 1.5 s reads t=2');

-- sub-second refills
SELECT is(rl_headers(pg_temp.take('s', 10, 5, 1, 0), 'api', 10, 5),
		  '{"RateLimit-Policy": "\"api\";q=5;w=1", "RateLimit": "\"api\";r=4;t=1"}',
		  '10/s, burst 5: w = 1 (ceil(0.5)), t = 1 (0.1 s rounded up)');
SELECT is(rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'api', 1000, 1)->>'RateLimit-Policy',
		  '"api";q=1;w=1', '1 at 1000/s: w is at least 1');
SELECT pg_temp.take('s2', 10, 5, 5, 0);
SELECT is(rl_headers(pg_temp.take('s2', 10, 5, 1, 0.05), 'api', 10, 5),
		  '{"RateLimit-Policy": "\"api\";q=5;w=1", "RateLimit": "\"api\";r=0;t=1", "Retry-After": "1"}',
		  'denied for 0.05 s: t=1 and Retry-After 1, never 0');

-- names
SELECT is(rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'a"b\c', 1, 1)->>'RateLimit-Policy',
		  '"a\"b\\c";q=1;w=1', '" and \ are escaped');
SELECT is(rl_headers(ROW(true, 1, 0, 0)::rl_decision, ' ~x! ', 1, 1)->>'RateLimit',
		  '" ~x! ";r=1', 'spaces and other printable ASCII are kept');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'café', 1, 1)$$,
				 '22023', 'limiter must be printable ASCII to name an HTTP rate limit',
				 'a name that is not ASCII is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, E'a\tb', 1, 1)$$,
				 '22023', NULL, 'a tab is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, E'a\nb', 1, 1)$$,
				 '22023', NULL, 'a line feed is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'a' || chr(127), 1, 1)$$,
				 '22023', NULL, 'DEL is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, '', 1, 1)$$,
				 '22023', 'limiter must not be empty', 'an empty name is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, NULL, 1, 1)$$,
				 '22004', 'limiter must not be null', 'a NULL name is refused');

-- arguments
SELECT throws_ok($$SELECT rl_headers(NULL, 'api', 1, 1)$$, '22004', 'd must not be null',
				 'a NULL decision is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, NULL, 0, 0)::rl_decision, 'api', 1, 1)$$,
				 '22004', 'd.remaining must not be null', 'a decision without remaining is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 2, 0, 0)::rl_decision, 'api', 1, 1)$$,
				 '22023', 'd.remaining must be between 0 and burst, not 2',
				 'remaining above burst: another limit''s decision');
SELECT is(rl_headers(ROW(false, 0, 9223372036854, 0)::rl_decision, 'api', 1, 1)->>'Retry-After',
		  '9223372036854', 'the largest retry_after accepted, in whole seconds: no wrap');
SELECT throws_ok($$SELECT rl_headers(ROW(false, 0, 9223372036855, 0)::rl_decision, 'api', 1, 1)$$,
				 '22023', 'd.retry_after must be a number of seconds, not 9223372036855',
				 'one second more is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, -1)::rl_decision, 'api', 1, 1)$$,
				 '22023', 'd.reset_after must be a number of seconds, not -1',
				 'a negative reset_after is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'api', 0, 1)$$,
				 '22023', NULL, 'rate 0 is refused as rl_take refuses it');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'api', 1, 0)$$,
				 '22023', NULL, 'burst 0 is refused');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'api', NULL, 1)$$,
				 '22004', 'rate must not be null', 'a NULL rate is refused');

-- the policy form
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('http-pol', 10.0 / 900, 10);
SELECT is(rl_headers(ROW(true, 8, 0, 170)::rl_decision, 'http-pol'),
		  rl_headers(ROW(true, 8, 0, 170)::rl_decision, 'http-pol', 10.0 / 900, 10),
		  'the policy form answers as the explicit form with the policy''s limit');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'http-none')$$,
				 '42704', 'limiter "http-none" has no policy', 'an unknown limiter');
SELECT throws_ok($$SELECT rl_headers(ROW(true, 1, 0, 0)::rl_decision, 'café')$$,
				 '22023', NULL, 'a bad name is refused before the policy is looked up');
-- a plan that could run in parallel (forced) and a policy no backend has
-- read yet: the function is not run in parallel mode
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('http-parallel', 1, 5);
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
					   THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END, 'on', true);
CREATE TEMP TABLE parallel_headers AS
	SELECT rl_headers(ROW(true, 5, 0, 0)::rl_decision, 'http-parallel') AS h;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
					   THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END, 'off', true);
SELECT is(h->>'RateLimit-Policy', '"http-parallel";q=5;w=5',
		  'the policy form in a plan forced to be parallel')
FROM parallel_headers;

-- rl_request_ip: request.headers as PostgREST sets it
CREATE FUNCTION pg_temp.request(headers text) RETURNS void LANGUAGE sql AS $$
	SELECT set_config('request.headers', headers, true),
		   set_config('request.method', 'GET', true),
		   set_config('request.path', '/items', true);
$$;
SELECT pg_temp.request('{"x-forwarded-for": "203.0.113.7"}');
SELECT is(rl_request_ip(), '203.0.113.7', 'the entry nginx wrote');
SELECT pg_temp.request('{"x-forwarded-for": "198.51.100.66, 203.0.113.7"}');
SELECT is(rl_request_ip(), '203.0.113.7', 'a forged leftmost entry is not the client');
SELECT is(rl_request_ip(NULL, 'X-Forwarded-For'), '203.0.113.7', 'the header''s name in any case');
SELECT pg_temp.request('{"x-forwarded-for": "198.51.100.66, 203.0.113.7, 10.1.2.3"}');
SELECT is(rl_request_ip('{10.0.0.0/8}'), '203.0.113.7', 'trusted proxies right of the client are skipped');
SELECT is(rl_request_ip(), '10.1.2.3', 'nobody trusted: the rightmost entry');
SELECT pg_temp.request('{"x-forwarded-for": "198.51.100.66, 203.0.113.7", "cf-connecting-ip": "2001:db8::1"}');
SELECT is(rl_request_ip(NULL, 'cf-connecting-ip'), '2001:db8::1', 'a CDN''s single-address header');
SELECT pg_temp.request('{"x-forwarded-for": "203.0.113.7, unknown"}');
SELECT is(rl_request_ip(), NULL, 'a malformed rightmost entry: NULL');
SELECT pg_temp.request('{"accept": "*/*"}');
SELECT is(rl_request_ip(), NULL, 'no such header: NULL');
SELECT pg_temp.request('');
SELECT is(rl_request_ip(), NULL, 'no request.headers: NULL');
SELECT throws_ok($$SELECT rl_request_ip('{0.0.0.0/0}')$$, '22023', NULL,
				 'a trust-all range is refused, header or not');
SELECT throws_ok($$SELECT rl_request_ip(NULL, NULL)$$, '22004', 'header must not be null',
				 'a NULL header name is refused');

-- rl_guard: the pre-request function, then the query; a denial as PostgREST reads it
CREATE FUNCTION pg_temp.guard_error(key text, cost int DEFAULT 1) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
	state text;
	message text;
	detail text;
BEGIN
	PERFORM rl_guard('http-guard', key, cost);
	RETURN NULL;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL;
	RETURN jsonb_build_object('sqlstate', state, 'message', message::jsonb,
							  'detail', detail::jsonb);
END $$;
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('http-guard', 1.0 / 3600, 2);
SELECT pg_temp.request('{"x-forwarded-for": "198.51.100.66, 203.0.113.8"}');
SELECT is(pg_temp.guard_error(host(rl_request_ip())), NULL, 'the first request passes');
SELECT pg_temp.request('{"x-forwarded-for": "198.51.100.67, 203.0.113.8"}');
SELECT is(pg_temp.guard_error(host(rl_request_ip())), NULL, 'the second, with another forged entry, too');
SELECT pg_temp.request('{"x-forwarded-for": "198.51.100.68, 203.0.113.8"}');
CREATE TEMP TABLE denial AS SELECT pg_temp.guard_error(host(rl_request_ip())) AS e;
-- the seconds depend on the clock between the calls: checked apart
SELECT is(e #- '{message,hint}' #- '{detail,headers,RateLimit}' #- '{detail,headers,Retry-After}',
		  '{"sqlstate": "PGRST",
			"message": {"code": "RL429", "message": "Too Many Requests",
						"details": "The rate limit http-guard is exhausted."},
			"detail": {"status": 429,
					   "headers": {"RateLimit-Policy": "\"http-guard\";q=2;w=7200"}}}',
		  'the third, whatever its forged entry: PGRST, the JSON body and status 429')
FROM denial;
SELECT ok(e->'message'->>'hint' = format('Retry in %s seconds.', e->'detail'->'headers'->>'Retry-After')
		  AND e->'detail'->'headers'->>'RateLimit' = format('"http-guard";r=0;t=%s', e->'detail'->'headers'->>'Retry-After')
		  AND (e->'detail'->'headers'->>'Retry-After')::int BETWEEN 3000 AND 3600,
		  'with Retry-After, the RateLimit field and the hint: the same seconds, about an hour')
FROM denial;
SELECT is(pg_temp.guard_error('203.0.113.10', 3)->'message'->>'hint',
		  'This request costs more than the limit ever allows.', 'a cost above burst: 429 with no retry');
SELECT is(pg_temp.guard_error('203.0.113.10', 3)->'detail'->'headers',
		  '{"RateLimit-Policy": "\"http-guard\";q=2;w=7200", "RateLimit": "\"http-guard\";r=2"}',
		  '... and no Retry-After');
SELECT cmp_ok((SELECT remaining FROM rl_take('http-guard', '203.0.113.9', 0)), '=', 2,
			  'another client''s budget is untouched');

SELECT * FROM finish();
ROLLBACK;
