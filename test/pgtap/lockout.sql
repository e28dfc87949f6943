-- Lockouts (1.3): a key denied under a policy with a lockout is shut out,
-- for longer each time it offends again soon; every rule to the microsecond
-- with the policy form of rl_take_at, in either store.
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(83);

-- test time: microseconds after a fixed origin
CREATE FUNCTION pg_temp.at(us bigint) RETURNS timestamptz
LANGUAGE sql AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + us * interval '1 microsecond' $$;
CREATE FUNCTION pg_temp.us_after_origin(t timestamptz) RETURNS bigint
LANGUAGE sql AS $$
	SELECT (extract(epoch FROM t - '2030-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint
$$;
CREATE FUNCTION pg_temp.us(seconds double precision) RETURNS bigint
LANGUAGE sql AS $$ SELECT round(seconds * 1000000)::bigint $$;
-- a decision at test time, answered as (allowed,remaining,retry_after,reset_after)
-- with both times in microseconds (an unknown retry_after is empty)
CREATE FUNCTION pg_temp.take(limiter text, key text, cost integer, us bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT format('(%s,%s,%s,%s)', d.allowed::text, d.remaining, pg_temp.us(d.retry_after),
				  pg_temp.us(d.reset_after))
	FROM rl_take_at(limiter, key, cost, pg_temp.at(us)) AS d
$$;
-- spend a key's whole burst at test time
CREATE FUNCTION pg_temp.spend(limiter text, key text, us bigint) RETURNS void
LANGUAGE sql AS $$
	SELECT rl_take_at(limiter, key, burst, pg_temp.at(us)) FROM rl_policies p
	WHERE p.limiter = spend.limiter
$$;
-- a key locked at time 0 (its burst spent, then one more), that spends its
-- burst again at us and offends once more: that offence's answer
CREATE FUNCTION pg_temp.offend_again(limiter text, key text, us bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT pg_temp.spend(limiter, key, 0);
	SELECT pg_temp.take(limiter, key, 1, 0);
	SELECT pg_temp.spend(limiter, key, us);
	SELECT pg_temp.take(limiter, key, 1, us)
$$;
-- a stored bucket as (tat,interval_us,lock_until,lock_us), times in test
-- microseconds; NULL when the key has no bucket
CREATE FUNCTION pg_temp.stored(limiter text, key text) RETURNS text
LANGUAGE sql AS $$
	SELECT format('(%s,%s,%s,%s)', pg_temp.us_after_origin(tat), interval_us,
				  pg_temp.us_after_origin(lock_until), lock_us)
	FROM rl_inspect(limiter, key) WHERE store IS NOT NULL
$$;
CREATE FUNCTION pg_temp.lock_us(limiter text, key text) RETURNS bigint
LANGUAGE sql AS $$ SELECT lock_us FROM rl_inspect(limiter, key) $$;
-- rl_stats counts only with ratelimit preloaded (here: the memory store's
-- run; test/t/047_lockout_concurrency.pl counts with both stores)
CREATE FUNCTION pg_temp.counting() RETURNS boolean
LANGUAGE sql AS $$ SELECT 'ratelimit' = ANY (string_to_array(current_setting('shared_preload_libraries'), ', ')) $$;
-- the lockouts and shadow denials of a limiter counted since the file began
CREATE TEMP TABLE counted (l text, lockouts bigint, shadow_denied bigint);
CREATE FUNCTION pg_temp.counters(limiter text) RETURNS TABLE (lockouts bigint, shadow_denied bigint)
LANGUAGE sql AS $$
	SELECT coalesce(sum(s.lockouts), 0)::bigint, coalesce(sum(s.shadow_denied), 0)::bigint
	FROM rl_stats s WHERE s.limiter = counters.limiter
$$;
CREATE FUNCTION pg_temp.counted_since(limiter text) RETURNS TABLE (lockouts bigint, shadow_denied bigint)
LANGUAGE sql AS $$
	SELECT n.lockouts - c.lockouts, n.shadow_denied - c.shadow_denied
	FROM pg_temp.counters(limiter) n, counted c WHERE c.l = limiter
$$;
-- is(counted since, want, description) of a limiter's 'lockouts' or
-- 'shadow_denied' when rl_stats counts, else a skip
CREATE FUNCTION pg_temp.counts(limiter text, counter text, want bigint, description text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	IF NOT pg_temp.counting() THEN
		RETURN skip('rl_stats needs ratelimit in shared_preload_libraries', 1);
	END IF;
	RETURN is((SELECT CASE counter WHEN 'lockouts' THEN c.lockouts ELSE c.shadow_denied END
			   FROM pg_temp.counted_since(limiter) AS c), want, description);
END $$;
DO $$ BEGIN
	IF pg_temp.counting() THEN
		INSERT INTO counted SELECT l, c.* FROM unnest(ARRAY['lo', 'lo_shadow', 'lo_rt']) AS l,
			LATERAL pg_temp.counters(l) AS c;
	END IF;
END $$;

-- the checks refuse what the rules cannot use, and accept the edges
SELECT throws_ok(format($$INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max)
						  VALUES ('bad', 1, 1, %s)$$, v), '23514', NULL,
				 format('rl_policies refuses lockout, growth, max (%s)', v))
FROM unnest(ARRAY[$$'10 s', 1, '9 s'$$, $$'10 s', 0.5, NULL$$, $$'10 s', 100.5, NULL$$,
				  $$NULL, 2, NULL$$, $$NULL, 1, '10 s'$$, $$'0.999999 s', 1, NULL$$,
				  $$'366 days 00:00:00.000001', 1, NULL$$, $$'1 s', 1, '366 days 00:00:00.000001'$$,
				  $$'1 s', 'NaN', NULL$$]) AS v;
SELECT lives_ok($$INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max)
				  VALUES ('edge_low', 1, 1, '1 s', 1, '1 s'), ('edge_high', 1, 1, '366 days', 100, '366 days')$$,
				'and accepts the edges: 1 s, 366 days, growth 1 and 100');

-- rate 1/s (T = 1 s), burst 2; lockout 10 s, twice as long each time, up to 35 s
INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max)
VALUES ('lo', 1, 2, '10 s', 2, '35 s');

-- the first denial of a request the burst holds starts a lockout of lockout
SELECT pg_temp.spend('lo', 'a', 0);
SELECT is(pg_temp.take('lo', 'a', 1, 500000), '(false,0,10000000,10000000)',
		  'a denial starts a lockout: retry_after = lockout, reset_after = lock_until - now');
SELECT is(pg_temp.stored('lo', 'a'), '(2000000,1000000,10500000,10000000)',
		  'written: lock_until = now + lockout, lock_us = lockout, the tat unspent');

-- locked: denied, nothing spent; a peek is allowed and says the same
SELECT is(pg_temp.take('lo', 'a', 1, 1000000), '(false,0,9500000,9500000)',
		  'locked: remaining 0, retry_after = reset_after = lock_until - now');
SELECT is(pg_temp.take('lo', 'a', 0, 1000000), '(true,0,0,9500000)',
		  'a peek while locked: allowed, remaining 0, reset_after = lock_until - now');
SELECT is(pg_temp.take('lo', 'a', 3, 1000000), '(false,0,9500000,9500000)',
		  'a cost above the burst while locked: retry_after = lock_until - now, not NULL');
SELECT is(pg_temp.take('lo', 'a', 1, 10499999), '(false,0,1,1)',
		  'still locked one microsecond before lock_until');
SELECT is(pg_temp.stored('lo', 'a'), '(2000000,1000000,10500000,10000000)',
		  'the locked calls wrote nothing');

-- the explicit forms still refuse a policy's limiter, locked key or not
SELECT throws_ok($$SELECT rl_take('lo', 'a', 1, 2)$$, '42501', NULL,
				 'the explicit rl_take refuses a limiter with a lockout policy');
SELECT throws_ok($$SELECT rl_take_at('lo', 'a', 1, 2, 1, '2026-01-01')$$, '42501', NULL,
				 'and so does the explicit rl_take_at');

-- at lock_until the lock has passed: GCRA decides, and allowed calls keep the lock state
SELECT is(pg_temp.take('lo', 'a', 1, 10500000), '(true,1,0,1000000)',
		  'at lock_until: allowed as 1.2');
SELECT is(pg_temp.stored('lo', 'a'), '(11500000,1000000,10500000,10000000)',
		  'an allowed call keeps lock_until and lock_us');

-- a repeat offence within the last lockout's length after its end grows it:
-- min(lockout_max, max(lockout, floor(lock_us * growth)))
SELECT pg_temp.take('lo', 'a', 1, 10500000);
SELECT is(pg_temp.take('lo', 'a', 1, 10500000), '(false,0,20000000,20000000)',
		  'a repeat offence at once: twice the last lockout, 20 s');
SELECT is(pg_temp.stored('lo', 'a'), '(12500000,1000000,30500000,20000000)',
		  'stored: lock_until = now + 20 s, lock_us = 20 s');
SELECT pg_temp.spend('lo', 'a', 30500000);
SELECT is(pg_temp.take('lo', 'a', 1, 30500000), '(false,0,35000000,35000000)',
		  'the next: 40 s capped at lockout_max, 35 s');
SELECT pg_temp.spend('lo', 'a', 65500000);
SELECT is(pg_temp.take('lo', 'a', 1, 65500000), '(false,0,35000000,35000000)',
		  'and it stays at lockout_max');
SELECT pg_temp.counts('lo', 'lockouts', 4,
		  'rl_stats counts each lockout started, not the locked calls');

-- forgiveness: an offence exactly lock_us after lock_until is a first one
-- ("passed" means <= now); one microsecond earlier still grows
SELECT is(pg_temp.offend_again('lo', 'b', 19999999), '(false,0,20000000,20000000)',
		  'an offence one microsecond before lock_until + lock_us grows the lockout');
SELECT is(pg_temp.offend_again('lo', 'c', 20000000), '(false,0,10000000,10000000)',
		  'an offence at lock_until + lock_us is forgiven: lockout again');
SELECT is(pg_temp.stored('lo', 'c'), '(22000000,1000000,30000000,10000000)',
		  'stored: the first length again');

-- a denial of a cost above the burst starts no lockout
SELECT is(pg_temp.take('lo', 'e', 3, 0), '(false,2,,0)',
		  'a cost above the burst: denied, retry_after NULL');
SELECT is(pg_temp.stored('lo', 'e'), NULL, 'and nothing stored');
SELECT pg_temp.spend('lo', 'e', 0);
SELECT is(pg_temp.take('lo', 'e', 3, 0), '(false,0,,2000000)',
		  'not even with the burst spent');
SELECT is(pg_temp.stored('lo', 'e'), '(2000000,1000000,,)', 'the key is not locked');

-- the growth is one double multiplication, then floor; a NULL lockout_max is lockout
INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max)
VALUES ('lo_floor', 1, 1, '1.000001 s', 1.5, '1 day'), ('lo_nomax', 1, 1, '1 s', 2, NULL);
SELECT is(pg_temp.offend_again('lo_floor', 'k', 1000001), '(false,0,1500001,1500001)',
		  'floor(1000001 * 1.5) = 1500001 microseconds');
SELECT is(pg_temp.offend_again('lo_nomax', 'k', 1000000), '(false,0,1000000,1000000)',
		  'without lockout_max a lockout never grows');

-- reset_after of a locked key is max(tat, lock_until) - now, with the tat
-- normalised to the policy of this call; a locked call writes not even that
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('lo_norm', 1.0 / 60, 1, '1 s');
SELECT pg_temp.spend('lo_norm', 'k', 0);
SELECT is(pg_temp.take('lo_norm', 'k', 1, 1), '(false,0,1000000,59999999)',
		  'locked with the tat ahead of lock_until: reset_after = tat - now');
UPDATE rl_policies SET rate = 1.0 / 120 WHERE limiter = 'lo_norm';
SELECT is(pg_temp.take('lo_norm', 'k', 1, 500000), '(false,0,500001,119000000)',
		  'after a limit change: reset_after from the tat normalised to the new T');
SELECT is(pg_temp.stored('lo_norm', 'k'), '(60000000,60000000,1000001,1000000)',
		  'and the locked call stored no normalisation');
SELECT is(pg_temp.take('lo_norm', 'k', 0, 500000), '(true,0,0,119000000)',
		  'nor a peek');
SELECT is(pg_temp.stored('lo_norm', 'k'), '(60000000,60000000,1000001,1000000)',
		  'the bucket as the lockout left it');

-- a changed length applies to the next lockout, never to the running one
UPDATE rl_policies SET lockout = '30 s' WHERE limiter = 'lo';
SELECT pg_temp.spend('lo', 'f', 0);
SELECT is(pg_temp.take('lo', 'f', 1, 0), '(false,0,30000000,30000000)',
		  'a lengthened lockout starts at its new length');
UPDATE rl_policies SET lockout = '20 s' WHERE limiter = 'lo';
SELECT is(pg_temp.take('lo', 'f', 1, 1000000), '(false,0,29000000,29000000)',
		  'a shortened one leaves a running lock as it is');
SELECT pg_temp.spend('lo', 'f', 30000000);
SELECT is(pg_temp.take('lo', 'f', 1, 30000000), '(false,0,35000000,35000000)',
		  'the next, grown from the stored 30 s, capped at 35 s');
SELECT pg_temp.spend('lo', 'g', 0);
SELECT pg_temp.take('lo', 'g', 1, 0);	-- locked for 20 s
UPDATE rl_policies SET lockout = '30 s', lockout_growth = 1.2, lockout_max = '40 s' WHERE limiter = 'lo';
SELECT pg_temp.spend('lo', 'g', 20000000);
SELECT is(pg_temp.take('lo', 'g', 1, 20000000), '(false,0,30000000,30000000)',
		  'a lockout longer than the grown 24 s: max(lockout, floor(lock_us * growth))');

-- a policy whose lockout is set to NULL ignores stored locks and keeps them;
-- set again, a lock still ahead applies again
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('lo_off', 1, 1, '100 s');
SELECT pg_temp.spend('lo_off', 'k', 0);
SELECT pg_temp.take('lo_off', 'k', 1, 0);
UPDATE rl_policies SET lockout = NULL WHERE limiter = 'lo_off';
SELECT is(pg_temp.take('lo_off', 'k', 1, 1000000), '(true,0,0,1000000)',
		  'without a lockout the stored lock is not enforced');
SELECT is(pg_temp.take('lo_off', 'k', 1, 1000000), '(false,0,1000000,1000000)',
		  'and a denial starts none');
SELECT is(pg_temp.stored('lo_off', 'k'), '(2000000,1000000,100000000,100000000)',
		  'the lock state is kept as stored');
UPDATE rl_policies SET lockout = '1 s' WHERE limiter = 'lo_off';
SELECT is(pg_temp.take('lo_off', 'k', 1, 50000000), '(false,0,50000000,50000000)',
		  'set again, the lock still ahead applies again');

-- shadow: decided and stored as enforced, lockouts included, answered allowed
INSERT INTO rl_policies (limiter, rate, burst, shadow, lockout) VALUES ('lo_shadow', 1, 1, true, '10 s');
SELECT pg_temp.spend('lo_shadow', 'k', 0);
SELECT ok((SELECT allowed AND retry_after = 0 FROM rl_take_at('lo_shadow', 'k', 1, pg_temp.at(0))),
		  'shadow: a would-be lockout is answered allowed');
SELECT is(pg_temp.stored('lo_shadow', 'k'), '(1000000,1000000,10000000,10000000)',
		  'and stored as enforced');
SELECT ok((SELECT allowed AND retry_after = 0 FROM rl_take_at('lo_shadow', 'k', 1, pg_temp.at(5000000))),
		  'a would-be locked call is answered allowed');
SELECT is(pg_temp.stored('lo_shadow', 'k'), '(1000000,1000000,10000000,10000000)',
		  'and writes nothing, as an enforced one would not');
SELECT pg_temp.counts('lo_shadow', 'lockouts', 1,
		  'the would-be lockout counts in lockouts');
SELECT pg_temp.counts('lo_shadow', 'shadow_denied', 2, 'its denials in shadow_denied');

-- by the server clock from here: rate 1 an hour, burst 1, lockout 1 hour
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('lo_rt', 1.0 / 3600, 1, '1 hour');
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('lo_free', 1.0 / 3600, 5);
-- seconds until a key's lock ends, by the server clock
CREATE FUNCTION pg_temp.lock_left(limiter text, key text) RETURNS double precision
LANGUAGE sql AS $$
	SELECT extract(epoch FROM lock_until - clock_timestamp()) FROM rl_inspect(limiter, key)
$$;
-- a retry_after that is the time left of the key's lock (a second of slack)
CREATE FUNCTION pg_temp.until_lock_ends(retry_after double precision, limiter text, key text)
RETURNS boolean LANGUAGE sql AS $$
	SELECT retry_after BETWEEN pg_temp.lock_left(limiter, key) - 1 AND pg_temp.lock_left(limiter, key) + 1
$$;

-- a key of lo_free that has spent nothing: no bucket, or one whose tat has
-- passed (the table store may lock a key's row to write another's lockout)
CREATE FUNCTION pg_temp.unspent(key text) RETURNS boolean
LANGUAGE sql AS $$
	SELECT store IS NULL OR tat <= clock_timestamp() FROM rl_inspect('lo_free', key)
$$;

-- rl_refund gives cells back and never ends a lockout; rl_reset forgets it
SELECT rl_take('lo_rt', 'r');
SELECT ok((SELECT NOT allowed AND retry_after BETWEEN 3599 AND 3600 FROM rl_take('lo_rt', 'r')),
		  'by the server clock, a denial starts a lockout of an hour');
CREATE TEMP TABLE locked_r AS SELECT lock_until, lock_us FROM rl_inspect('lo_rt', 'r');
SELECT rl_refund('lo_rt', 'r', 1);
SELECT ok((SELECT NOT allowed AND pg_temp.until_lock_ends(retry_after, 'lo_rt', 'r')
		   FROM rl_take('lo_rt', 'r')),
		  'after rl_refund the key is still locked');
SELECT is((SELECT (lock_until, lock_us)::text FROM rl_inspect('lo_rt', 'r')),
		  (SELECT (lock_until, lock_us)::text FROM locked_r), 'rl_refund kept the lock');
SELECT ok(rl_reset('lo_rt', 'r') AND (SELECT store IS NULL FROM rl_inspect('lo_rt', 'r')),
		  'rl_reset forgets the bucket, lock included');
SELECT ok((rl_take('lo_rt', 'r')).allowed, 'and the key is allowed again');

-- rl_take_all: a locked request denies the call; a request whose denial
-- starts a lockout denies it too, and the lockout is written; nothing else spent
SELECT rl_take('lo_rt', 'all_locked');
SELECT rl_take('lo_rt', 'all_locked');
SELECT ok((SELECT NOT allowed AND limiter = 'lo_rt' AND remaining = 0
				  AND pg_temp.until_lock_ends(retry_after, 'lo_rt', 'all_locked')
		   FROM rl_take_all(ARRAY['lo_free', 'lo_rt'], ARRAY['x1', 'all_locked'])),
		  'rl_take_all with a locked request: denied, retry_after = lock_until - now');
SELECT ok((SELECT NOT allowed AND limiter = 'lo_rt' AND retry_after IS NOT NULL
				  AND pg_temp.until_lock_ends(retry_after, 'lo_rt', 'all_locked')
		   FROM rl_take_all(ARRAY['lo_rt', 'lo_free'], ARRAY['all_locked', 'x1'], ARRAY[2, 1])),
		  'with a locked request of a cost above the burst: retry_after not NULL');
SELECT rl_take('lo_rt', 'all_starts');
SELECT ok((SELECT NOT allowed AND limiter = 'lo_rt' AND retry_after BETWEEN 3599 AND 3600
		   FROM rl_take_all(ARRAY['lo_free', 'lo_rt'], ARRAY['x2', 'all_starts'])),
		  'rl_take_all with a request whose denial starts a lockout: denied, retry_after = lockout');
SELECT is(pg_temp.lock_us('lo_rt', 'all_starts'), 3600000000::bigint,
		  'the lockout is written although the call is denied');
SELECT is(array[pg_temp.unspent('x1'), pg_temp.unspent('x2')], array[true, true],
		  'the other requests spent nothing');

-- rl_take_all_detail: the same, with each request's own decision
SELECT rl_take('lo_rt', 'detail_starts');
CREATE TEMP TABLE detail AS
SELECT * FROM rl_take_all_detail(ARRAY['lo_free', 'lo_rt', 'lo_rt'], ARRAY['x3', 'detail_starts', 'all_locked']);
SELECT ok((SELECT NOT allowed AND limiter = 'lo_rt' AND retry_after IS NOT NULL
				  AND pg_temp.until_lock_ends(retry_after, 'lo_rt', 'all_locked')
		   FROM detail),
		  'rl_take_all_detail with a locked request and a starting lockout: denied, the longer wait');
SELECT ok((SELECT NOT r.allowed AND r.remaining = 0 AND r.retry_after BETWEEN 3599 AND 3600
		   FROM detail, LATERAL (SELECT (requests[2]).*) AS r),
		  'the starting lockout''s own decision is the locked one');
SELECT ok((SELECT NOT r.allowed AND pg_temp.until_lock_ends(r.retry_after, 'lo_rt', 'all_locked')
		   FROM detail, LATERAL (SELECT (requests[3]).*) AS r),
		  'the locked request''s own decision: retry_after = lock_until - now');
SELECT ok((SELECT r.allowed AND r.remaining = 5 FROM detail, LATERAL (SELECT (requests[1]).*) AS r),
		  'the free request''s own decision: unspent');
SELECT is(pg_temp.lock_us('lo_rt', 'detail_starts'), 3600000000::bigint,
		  'the lockout is written although the call is denied');
SELECT ok(pg_temp.unspent('x3'), 'the free request spent nothing');
SELECT pg_temp.counts('lo_rt', 'lockouts', 4,
		  'rl_stats counts the lockouts started in rl_take and both forms of rl_take_all');

-- cleanup deletes a bucket only once its tat and lock_until + lock_us have
-- both passed (by the server clock)
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('lo_clean', 1000, 1, '10 s'),
	('lo_clean_slow', 1.0 / 60, 1, '1 s');
CREATE FUNCTION pg_temp.lock_at(limiter text, key text, ago interval) RETURNS void
LANGUAGE sql AS $$
	SELECT rl_take_at(limiter, key, 1, clock_timestamp() - ago) FROM generate_series(1, 2)
$$;
SELECT pg_temp.lock_at('lo_clean', 'forgiven', '25 s');	-- lock_until + lock_us 5 s ago
SELECT pg_temp.lock_at('lo_clean', 'unforgiven', '15 s');	-- lock_until 5 s ago, + lock_us 5 s ahead
SELECT pg_temp.lock_at('lo_clean_slow', 'tat_ahead', '30 s');	-- lock passed, tat 30 s ahead
SELECT pg_temp.lock_at('lo_clean', 'locked', '1 s');		-- lock_until 9 s ahead
SELECT rl_cleanup();
SELECT is((SELECT store FROM rl_inspect('lo_clean', 'forgiven')), NULL,
		  'rl_cleanup deletes a bucket whose tat and lock_until + lock_us have passed');
SELECT isnt((SELECT store FROM rl_inspect('lo_clean', 'unforgiven')), NULL,
			'but keeps one whose lock has ended and lock_until + lock_us is ahead');
SELECT isnt((SELECT store FROM rl_inspect('lo_clean_slow', 'tat_ahead')), NULL,
			'one whose lock has been forgiven but tat is ahead');
SELECT isnt((SELECT store FROM rl_inspect('lo_clean', 'locked')), NULL, 'and a locked one');
SELECT ok((SELECT NOT allowed FROM rl_take('lo_clean', 'locked')), 'which is still locked');

-- a key that was never locked is not locked at any time: lock_until 0 is
-- also an instant (2000-01-01), and a call before it is decided by the limit
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('lo_y2k', 1, 5, '10 s');
SELECT is((SELECT (allowed, remaining)::text FROM rl_take_at('lo_y2k', 'k', 1, '1999-12-31 23:59:00+00')),
		  '(t,4)', 'a new key before 2000 is decided by its limit');
SELECT is((SELECT (allowed, remaining)::text FROM rl_take_at('lo_y2k', 'k', 1, '1999-12-31 23:59:00.1+00')),
		  '(t,3)', 'and so is its next call: never locked, it is not locked');
SELECT is((SELECT lock_us FROM rl_inspect('lo_y2k', 'k')), NULL, 'and it holds no lock');

-- Retry-After of a locked answer: the lock's remainder, rounded up (the 1.1
-- rule, never earlier than t). T = 60 s, tau = 120 s; the third call at 2 s
-- starts a lockout of 600 s, until 602 s; at 102.5 s reset_after is
-- max(tat 120 s, 602 s) - 102.5 s = 499.5 s, so t = ceil(499.5 mod 60) = 20
INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('lo_hdr', 1.0 / 60, 2, '10 minutes');
SELECT pg_temp.take('lo_hdr', 'k', 1, pg_temp.us(0)), pg_temp.take('lo_hdr', 'k', 1, pg_temp.us(1));
SELECT is((SELECT rl_headers(d, 'lo_hdr') - 'RateLimit-Policy'
		   FROM rl_take_at('lo_hdr', 'k', 1, pg_temp.at(pg_temp.us(2))) d),
		  '{"RateLimit": "\"lo_hdr\";r=0;t=60", "Retry-After": "600"}',
		  'rl_headers of the denial that starts a lockout: Retry-After is its length');
SELECT is((SELECT rl_headers(d, 'lo_hdr') - 'RateLimit-Policy'
		   FROM rl_take_at('lo_hdr', 'k', 1, pg_temp.at(pg_temp.us(102.5))) d),
		  '{"RateLimit": "\"lo_hdr\";r=0;t=20", "Retry-After": "500"}',
		  'and of a locked answer: the lock''s remainder, rounded up');
-- rl_guard by the server clock: a lockout's denials answer 429 with its
-- Retry-After.  rl_guard raises, so in the table store its own decision rolls
-- back with the exception block that catches it here: the lock is started by
-- rl_take beforehand
CREATE FUNCTION pg_temp.guard_headers(key text) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
	detail text;
BEGIN
	PERFORM rl_guard('lo_hdr', key);
	RETURN NULL;
EXCEPTION WHEN SQLSTATE 'PGRST' THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
	RETURN detail::jsonb->'headers';
END $$;
SELECT rl_take('lo_hdr', 'starts'), rl_take('lo_hdr', 'starts');
SELECT is(pg_temp.guard_headers('starts')->>'Retry-After', '600',
		  'rl_guard: the denial that starts a lockout answers 429 with Retry-After its length');
SELECT rl_take('lo_hdr', 'locked'), rl_take('lo_hdr', 'locked'), rl_take('lo_hdr', 'locked');
SELECT cmp_ok((pg_temp.guard_headers('locked')->>'Retry-After')::int, '<=', 600,
		  'and a locked call the remainder, rounded up');

SELECT * FROM finish();
ROLLBACK;
