-- Durable limits (1.3): a policy with durable = true keeps its buckets in the
-- logged rl_buckets_durable, in either store, by the table store's rules.
-- (test/t/048_durable.pl: a crash, a standby, a promotion and pg_dump.)
-- needs 1.1
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
SET LOCAL ratelimit.in_transaction = allow;

SELECT plan(38);

CREATE FUNCTION pg_temp.at(us bigint) RETURNS timestamptz
LANGUAGE sql AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + us * interval '1 microsecond' $$;
-- a decision at test time as text, both times in microseconds
CREATE FUNCTION pg_temp.take(limiter text, key text, cost integer, us bigint) RETURNS text
LANGUAGE sql AS $$
	SELECT format('(%s,%s,%s,%s)', d.allowed, d.remaining,
				  round(d.retry_after * 1000000)::bigint, round(d.reset_after * 1000000)::bigint)
	FROM rl_take_at(limiter, key, cost, pg_temp.at(us)) AS d
$$;
-- a stored bucket as (tat,interval_us,lock_until,lock_us), without where
CREATE FUNCTION pg_temp.bucket(limiter text, key text) RETURNS text
LANGUAGE sql AS $$
	SELECT format('(%s,%s,%s,%s)', tat, interval_us, lock_until, lock_us)
	FROM rl_inspect(limiter, key)
$$;
CREATE FUNCTION pg_temp.place(limiter text, key text) RETURNS text
LANGUAGE sql AS $$ SELECT store FROM rl_inspect(limiter, key) $$;
CREATE FUNCTION pg_temp.rows(t regclass) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
	EXECUTE format('SELECT count(*) FROM %s', t) INTO n;
	RETURN n;
END $$;
-- what query does with setting set to value: 'ran' or its SQLSTATE; the
-- setting and any table write are rolled back either way
CREATE FUNCTION pg_temp.under(setting text, value text, query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		PERFORM set_config(setting, value, true);
		EXECUTE query;
		RAISE EXCEPTION 'ran';
	EXCEPTION WHEN OTHERS THEN
		RETURN CASE WHEN SQLSTATE = 'P0001' THEN 'ran' ELSE SQLSTATE END;
	END;
END $$;
CREATE FUNCTION pg_temp.memory() RETURNS boolean
LANGUAGE sql AS $$ SELECT store = 'memory' FROM rl_store_status() $$;

-- the table: rl_buckets' columns, logged, owner-only, no index on tat
SELECT is((SELECT relpersistence FROM pg_class WHERE oid = 'rl_buckets_durable'::regclass), 'p',
		  'rl_buckets_durable is an ordinary logged table');
SELECT is((SELECT array_agg(format('%s %s', attname, format_type(atttypid, atttypmod)) ORDER BY attnum)
		   FROM pg_attribute WHERE attrelid = 'rl_buckets_durable'::regclass AND attnum > 0),
		  (SELECT array_agg(format('%s %s', attname, format_type(atttypid, atttypmod)) ORDER BY attnum)
		   FROM pg_attribute WHERE attrelid = 'rl_buckets'::regclass AND attnum > 0),
		  'with rl_buckets'' columns');
SELECT is((SELECT count(*) FROM pg_index WHERE indrelid = 'rl_buckets_durable'::regclass), 1::bigint,
		  'and one index, its primary key (updates stay HOT)');
SELECT is((SELECT relacl FROM pg_class WHERE oid = 'rl_buckets_durable'::regclass),
		  (SELECT relacl FROM pg_class WHERE oid = 'rl_buckets'::regclass),
		  'owner-only, like rl_buckets');
SELECT is((SELECT column_default FROM information_schema.columns
		   WHERE table_name = 'rl_policies' AND column_name = 'durable'), 'false',
		  'rl_policies.durable defaults to false');

-- rate 1/s, burst 3, lockout 10 s doubling: the same policy twice, one durable
INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, durable)
VALUES ('d_plain', 1, 3, '10 s', 2, false), ('d_kept', 1, 3, '10 s', 2, true);

-- the same history decides alike, to the microsecond, and stores alike
CREATE TEMP TABLE history (n serial, us bigint, cost integer);
INSERT INTO history (us, cost)
VALUES (0, 1), (0, 0), (100000, 2), (200000, 1), (300000, 1), (400000, 0), (5000000, 3),
	   (5000001, 1), (15000000, 1), (15500000, 4), (16000000, 3), (16000001, 1),
	   (60000000, 2), (61000000, 1), (200000000, 0);
SELECT is(array_agg(pg_temp.take('d_kept', 'ada', cost, us) ORDER BY n),
		  array_agg(pg_temp.take('d_plain', 'ada', cost, us) ORDER BY n),
		  'a durable limiter decides as the same policy kept elsewhere')
FROM history;
SELECT is(pg_temp.bucket('d_kept', 'ada'), pg_temp.bucket('d_plain', 'ada'),
		  'and stores the same bucket, lock included');
SELECT is(pg_temp.place('d_kept', 'ada'), 'durable', 'rl_inspect says where: durable');
SELECT is(pg_temp.place('d_plain', 'ada'), CASE WHEN pg_temp.memory() THEN 'memory' ELSE 'table' END,
		  'the other lives in the store''s place');

-- the row is in rl_buckets_durable, and in no other table
SELECT is(pg_temp.rows('rl_buckets_durable'), 1::bigint, 'one durable row');
SELECT is(pg_temp.rows('rl_buckets'), CASE WHEN pg_temp.memory() THEN 0 ELSE 1 END::bigint,
		  'rl_buckets holds only the other limiter''s key (none with the memory store)');
SELECT is((SELECT interval_us FROM rl_buckets_durable), 1000000::bigint,
		  'the durable row holds the bucket');
SELECT is((SELECT count(*) FROM rl_store_status() WHERE table_buckets = pg_temp.rows('rl_buckets')
		   + pg_temp.rows('rl_buckets_durable')), 1::bigint,
		  'rl_store_status counts the buckets of both tables');

-- a denial that starts no lockout writes nothing
SELECT pg_temp.take('d_kept', 'bob', 3, 0);
CREATE TEMP TABLE version AS SELECT ctid AS tid, xmin::text AS x FROM rl_buckets_durable;
SELECT is(pg_temp.take('d_kept', 'bob', 4, 100), '(f,0,,2999900)'::text,
		  'a cost above the burst is denied, retry_after unknown');
SELECT is((SELECT count(*) FROM rl_buckets_durable d JOIN version v ON d.ctid = v.tid AND d.xmin::text = v.x), 2::bigint,
		  'and writes no row version');

-- the table store's rules, in both stores: a read-only transaction refuses
SELECT is(pg_temp.under('transaction_read_only', 'on', $$SELECT rl_take('d_kept', 'ro')$$), '25006',
		  'a durable decision is refused in a read-only transaction');
SELECT is(pg_temp.under('transaction_read_only', 'on',
						$$SELECT rl_take_all(ARRAY['d_plain', 'd_kept'], ARRAY['ro', 'ro'])$$), '25006',
		  'and so is rl_take_all over a durable key');
SELECT is(pg_temp.under('transaction_read_only', 'on', $$SELECT rl_take('d_kept', 'ro', 0)$$), 'ran',
		  'a durable peek reads only');
SELECT is(pg_temp.under('ratelimit.in_transaction', 'error', $$SELECT rl_take('d_kept', 'tx')$$), '25001',
		  'ratelimit.in_transaction applies to a durable decision');
SELECT is(pg_temp.under('ratelimit.in_transaction', 'error',
						$$SELECT rl_take_all(ARRAY['d_plain', 'd_kept'], ARRAY['tx', 'tx'])$$), '25001',
		  'and to rl_take_all over a durable key');
SELECT is(pg_temp.under('ratelimit.in_transaction', 'error', $$SELECT rl_take('d_plain', 'tx')$$),
		  CASE WHEN pg_temp.memory() THEN 'ran' ELSE '25001' END,
		  'and to another limiter''s only in the table store');

-- a durable decision is a table decision: it rolls back with its transaction
SAVEPOINT before_take;
SELECT rl_take('d_kept', 'carol');
ROLLBACK TO SAVEPOINT before_take;
SELECT is(pg_temp.place('d_kept', 'carol'), NULL, 'a rolled-back durable decision is rolled back');

-- rl_refund gives back where the limiter decides
SELECT rl_take('d_kept', 'dave', 3);
SELECT is((rl_take('d_kept', 'dave', 0)).remaining, 0, 'dave spent his burst');
SELECT ok(rl_refund('d_kept', 'dave', 2), 'rl_refund changes the durable bucket');
SELECT is((rl_take('d_kept', 'dave', 0)).remaining, 2, 'and gives the cells back');

-- rl_take_all over durable, store and explicit keys: all or nothing
SELECT rl_take('d_kept', 'eve', 3);
SELECT is((rl_take_all(ARRAY['d_plain', 'd_kept'], ARRAY['eve', 'eve'])).limiter, 'd_kept',
		  'a spent durable key denies the call');
SELECT is((rl_take('d_plain', 'eve', 0)).remaining, 3, 'and the other key is not spent');
SELECT is((rl_take_all(ARRAY['d_plain', 'd_kept'], ARRAY['fay', 'fay'], ARRAY[4, 1])).limiter, 'd_plain',
		  'a denied store key denies the call');
SELECT is((rl_take('d_kept', 'fay', 0)).remaining, 3, 'and the durable key is not spent');
SELECT is((rl_take_all(ARRAY['d_kept', 'd_plain'], ARRAY['gus', 'gus'], ARRAY[2, 1])).remaining, 1,
		  'an allowed call spends both');
SELECT is(ARRAY[pg_temp.place('d_kept', 'gus'), pg_temp.place('d_plain', 'gus')],
		  ARRAY['durable', CASE WHEN pg_temp.memory() THEN 'memory' ELSE 'table' END],
		  'each where it lives');

-- switching durable starts afresh in the new place; rl_reset forgets both
SELECT rl_take('d_plain', 'hal', 3);
UPDATE rl_policies SET durable = true WHERE limiter = 'd_plain';
SELECT is((rl_take('d_plain', 'hal', 0)).remaining, 3, 'a limiter made durable starts afresh');
SELECT is(pg_temp.place('d_plain', 'hal'), NULL, 'with no durable bucket yet');
SELECT rl_take('d_plain', 'hal', 1);
SELECT ok(rl_reset('d_plain', 'hal'), 'rl_reset forgets it');
UPDATE rl_policies SET durable = false WHERE limiter = 'd_plain';
SELECT is(pg_temp.place('d_plain', 'hal'), NULL, 'in both places: the old bucket is gone too');

-- cleanup deletes the passed rows of both tables
SELECT rl_take_at('d_kept', 'old', 1, now() - interval '1 hour');
SELECT cmp_ok(rl_cleanup(), '>=', 1::bigint, 'rl_cleanup deletes passed buckets');
SELECT is(pg_temp.place('d_kept', 'old'), NULL, 'a passed durable bucket among them');
SELECT is(pg_temp.place('d_kept', 'gus'), 'durable', 'a live one stays');

SELECT * FROM finish();
ROLLBACK;
