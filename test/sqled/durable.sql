-- Durable limits in the SQL edition: a durable policy's buckets live in
-- the logged rl_buckets_durable, the others in the unlogged rl_buckets; a
-- denial writes nothing there; changing durable starts afresh in the new
-- place; rl_inspect, rl_reset, rl_refund, rl_cleanup and rl_take_all cover
-- both tables.  Run by the edition's owner.
BEGIN;
SELECT plan(17);

CREATE FUNCTION pg_temp.rows(t regclass) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	EXECUTE format('SELECT count(*) FROM %s', t) INTO n;
	RETURN n;
END $$;

SELECT is((SELECT relpersistence::text FROM pg_class WHERE oid = 'rl_buckets_durable'::regclass), 'p',
		  'rl_buckets_durable is logged');
SELECT is((SELECT relpersistence::text FROM pg_class WHERE oid = 'rl_buckets'::regclass), 'u',
		  'rl_buckets is unlogged');

INSERT INTO rl_policies (limiter, rate, burst, durable) VALUES ('sign_in', 1.0 / 60, 2, true);
INSERT INTO rl_policies (limiter, rate, burst) VALUES ('api', 1.0 / 60, 2);
SELECT rl_take('sign_in', 'ada', 1);
SELECT is(pg_temp.rows('rl_buckets_durable') || ' ' || pg_temp.rows('rl_buckets'), '1 0',
		  'a durable decision is stored in rl_buckets_durable');
SELECT is((SELECT store FROM rl_inspect('sign_in', 'ada')), 'durable', 'rl_inspect says where');
SELECT is((rl_take('sign_in', 'ada', 1)).remaining, 0, 'its budget is spent there');
CREATE TEMP TABLE before AS SELECT xmin::text AS x, ctid::text AS c, tat FROM rl_buckets_durable;
SELECT is((rl_take('sign_in', 'ada', 1)).allowed, false, 'then denied');
SELECT is((SELECT xmin::text || ctid::text FROM rl_buckets_durable), (SELECT x || c FROM before),
		  'a denial writes nothing');

-- all or nothing over both tables: the durable denial spends nothing of api
SELECT is((rl_take_all(ARRAY['api', 'sign_in'], ARRAY['ada', 'ada'])).limiter, 'sign_in',
		  'rl_take_all over both tables is denied by the durable one');
SELECT is(pg_temp.rows('rl_buckets'), 0::bigint, 'and stores nothing in rl_buckets');
SELECT is((rl_take_all(ARRAY['api', 'sign_in'], ARRAY['bob', 'bob'])).allowed, true, 'both allowed');
SELECT is(pg_temp.rows('rl_buckets') || ' ' || pg_temp.rows('rl_buckets_durable'), '1 2',
		  'each in its table');

SELECT is(rl_refund('sign_in', 'bob'), true, 'rl_refund gives back in the durable table');
SELECT is(rl_reset('sign_in', 'bob') AND rl_reset('api', 'bob'), true, 'rl_reset forgets in both');

-- durable off: the limiter starts afresh in rl_buckets
UPDATE rl_policies SET durable = false WHERE limiter = 'sign_in';
SELECT is((rl_take('sign_in', 'ada', 1)).remaining, 1, 'changing durable starts afresh');
SELECT is((SELECT store FROM rl_inspect('sign_in', 'ada')), 'table', 'in the new place');

-- cleanup covers both tables
UPDATE rl_buckets_durable SET tat = '2000-01-01';
UPDATE rl_buckets SET tat = '2000-01-01';
SELECT is(rl_cleanup(), 2::bigint, 'rl_cleanup deletes the passed buckets of both tables');
SELECT is(pg_temp.rows('rl_buckets') + pg_temp.rows('rl_buckets_durable'), 0::bigint, 'none is left');

SELECT * FROM finish();
ROLLBACK;
