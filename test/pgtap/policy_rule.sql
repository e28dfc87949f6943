-- Who may set a limit: a limiter with a row in rl_policies is decided by its
-- policy only.  The explicit forms for it are refused (42501, naming it)
-- before anything is read or written, so a role that may call only the
-- policy forms can neither lower a policy's limit nor reset nor refund.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(24);

-- a key's stored bucket and, with the table store, its row version
CREATE FUNCTION pg_temp.stored(text, text) RETURNS text
LANGUAGE sql AS $$
	SELECT row(i.store, i.tat, i.interval_us,
			   (SELECT xmin::text FROM rl_buckets
				WHERE key = sha256(convert_to($1, 'UTF8') || '\x00'::bytea || convert_to($2, 'UTF8'))))::text
	FROM rl_inspect($1, $2) i
$$;

INSERT INTO rl_policies (limiter, rate, burst) VALUES ('sign_in', 1.0 / 3600, 2);
SELECT ok((SELECT bool_and(d.allowed) FROM generate_series(1, 2) AS n,
				  LATERAL rl_take('sign_in', 'ada', n - n + 1) AS d),
		  'the policy allows its burst of 2');
SELECT ok(NOT (rl_take('sign_in', 'ada')).allowed, 'and denies the third');
CREATE TEMP TABLE spent AS SELECT pg_temp.stored('sign_in', 'ada') AS b;

-- the explicit forms, even by the owner: refused, naming the limiter
SELECT throws_ok($$SELECT rl_take('sign_in', 'ada', 1000000, 1)$$, '42501',
				 'limiter "sign_in" has a policy: rl_take cannot set its limit',
				 'the explicit rl_take of a limiter with a policy is refused');
SELECT throws_ok($$SELECT rl_take('sign_in', 'ada', 1000000, 1, 0)$$, '42501',
				 'limiter "sign_in" has a policy: rl_take cannot set its limit',
				 'even a peek');
SELECT throws_ok($$SELECT rl_take_at('sign_in', 'ada', 1000000, 1, 1, now())$$, '42501',
				 'limiter "sign_in" has a policy: rl_take_at cannot set its limit',
				 'rl_take_at too');
SELECT throws_ok($$SELECT rl_take_all(ARRAY['free', 'sign_in'], ARRAY['ada', 'ada'],
									  ARRAY[1000000, 1000000], ARRAY[1, 1])$$, '42501',
				 'limiter "sign_in" has a policy: rl_take_all cannot set its limit',
				 'and the explicit rl_take_all, whichever element names it');

-- the error as a client reads it: the hint, and which element
CREATE FUNCTION pg_temp.refusal(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	hint text;
	context text;
BEGIN
	EXECUTE q;
	RETURN NULL;
EXCEPTION WHEN insufficient_privilege THEN
	GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT, context = PG_EXCEPTION_CONTEXT;
	RETURN hint || ' | ' || split_part(context, E'\n', 1);
END $$;
SELECT is(pg_temp.refusal($$SELECT rl_take('sign_in', 'ada', 1000000, 1)$$),
		  'Call rl_take(limiter, key, cost), the policy form. | SQL statement "SELECT rl_take(''sign_in'', ''ada'', 1000000, 1)"',
		  'its hint names the policy form');
SELECT is(pg_temp.refusal($$SELECT rl_take_all(ARRAY['free', 'sign_in'], ARRAY['ada', 'ada'],
											   ARRAY[1000000, 1000000], ARRAY[1, 1])$$),
		  'Call rl_take_all(limiters, keys, costs), the policy form. | element 2 of the arrays of rl_take_all',
		  'rl_take_all''s names the policy form and the element');
SELECT is(pg_temp.stored('sign_in', 'ada'), (SELECT b FROM spent),
		  'the refused calls wrote nothing: the bucket is as the policy left it');
SELECT ok((SELECT store IS NULL FROM rl_inspect('free', 'ada')),
		  'not even the other element of rl_take_all''s call');
SELECT ok(NOT (rl_take('sign_in', 'ada')).allowed, 'the key is still denied by its policy');

-- names without a policy keep the explicit form; a policy made or dropped
-- applies to it at once
SELECT ok((rl_take('free', 'ada', 10, 1)).allowed, 'a limiter without a policy: explicit as ever');
SELECT ok((rl_take_all(ARRAY['free'], ARRAY['bob'], ARRAY[10.0], ARRAY[1])).allowed,
		  'in rl_take_all too');
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('free', 10, 1);
SELECT throws_ok($$SELECT rl_take('free', 'ada', 10, 1)$$, '42501', NULL,
				 'a new policy closes its explicit form at once');
DELETE FROM rl_policies WHERE limiter = 'free';
SELECT lives_ok($$SELECT rl_take('free', 'ada', 10, 1)$$, 'a dropped one opens it again');

-- a role that may call only the policy forms: the explicit ones revoked from
-- PUBLIC, as docs/policies.md recommends on a shared database
CREATE ROLE rl_test_policy_only;
GRANT USAGE ON SCHEMA public TO rl_test_policy_only;
REVOKE EXECUTE ON FUNCTION rl_take(text, text, double precision, integer, integer),
	rl_take_all(text[], text[], double precision[], integer[], integer[]) FROM PUBLIC;
SET LOCAL ROLE rl_test_policy_only;
SELECT ok(NOT (rl_take('sign_in', 'ada')).allowed, 'the role decides by policy: denied');
SELECT throws_ok(q, '42501', NULL, 'refused to the role: ' || q)
FROM unnest(ARRAY[$$SELECT rl_take('sign_in', 'ada', 1000000, 1)$$,
				  $$SELECT rl_take_at('sign_in', 'ada', 1000000, 1, 1, now())$$,
				  $$SELECT rl_take_all(ARRAY['sign_in'], ARRAY['ada'], ARRAY[1000000], ARRAY[1])$$,
				  $$SELECT rl_reset('sign_in', 'ada')$$,
				  $$SELECT rl_refund('sign_in', 'ada', 2)$$,
				  $$UPDATE rl_policies SET rate = 1000000, burst = 1$$]) AS q;
RESET ROLE;
-- with the explicit forms granted to everybody (the default), still refused
GRANT EXECUTE ON FUNCTION rl_take(text, text, double precision, integer, integer),
	rl_take_all(text[], text[], double precision[], integer[], integer[]) TO PUBLIC;
SET LOCAL ROLE rl_test_policy_only;
SELECT throws_ok($$SELECT rl_take('sign_in', 'ada', 1000000, 1)$$, '42501',
				 'limiter "sign_in" has a policy: rl_take cannot set its limit',
				 'a role granted the explicit form cannot lower the policy''s limit either');
RESET ROLE;
SELECT ok(NOT (rl_take('sign_in', 'ada')).allowed AND pg_temp.stored('sign_in', 'ada') = (SELECT b FROM spent),
		  'after all of it the key is still spent and denied');

SELECT * FROM finish();
ROLLBACK;
