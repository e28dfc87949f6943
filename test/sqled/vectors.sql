-- The GCRA vectors of test/vectors/gcra.json (written from include/gcra.h)
-- through the SQL edition: its limit checks, lockout checks, decisions and
-- decisions over several buckets answer what gcra.h answers, field by
-- field; and every sequence step again through rl_take_at against a bucket
-- stored as the step gives it.  Run by the edition's owner from the
-- checkout's root.
BEGIN;
\set vectors `cat test/vectors/gcra.json`
CREATE TEMP TABLE vectors AS SELECT :'vectors'::jsonb AS j;

-- a verdict as the vectors write a decision
CREATE FUNCTION pg_temp.expected(e jsonb) RETURNS rl_sql_verdict
LANGUAGE sql AS $$
	SELECT ROW((e->>'allowed')::boolean, (e->>'store')::boolean, (e->>'normalised')::boolean,
			   (e->>'locked')::boolean, (e->>'lock_started')::boolean,
			   (e->>'new_tat_us')::bigint, (e->>'new_lock_until_us')::bigint,
			   (e->>'new_lock_us')::bigint, (e->>'remaining')::integer,
			   (e->>'retry_known')::boolean, (e->>'retry_after_us')::bigint,
			   (e->>'reset_after_us')::bigint)::rl_sql_verdict
$$;

-- the limit of a request or step of the vectors at now
CREATE FUNCTION pg_temp.limit_of(r jsonb, now bigint) RETURNS rl_sql_limit
LANGUAGE sql AS $$
	SELECT ROW(l.interval_us, l.tolerance_us, l.burst, l.lockout_us, l.lockout_max_us, l.lockout_growth,
			   COALESCE((r->>'shadow')::boolean, false), false, l.rate)::rl_sql_limit
	FROM rl_sql_limit((r->>'rate')::double precision, (r->>'burst')::integer, (r->>'cost')::integer,
					  now, (r->>'lockout_us')::bigint, (r->>'lockout_growth')::double precision,
					  (r->>'lockout_max_us')::bigint) AS l
$$;

CREATE FUNCTION pg_temp.decide(r jsonb, now bigint) RETURNS rl_sql_verdict
LANGUAGE sql AS $$
	SELECT rl_sql_decide(pg_temp.limit_of(r, now), (r->'bucket'->>'present')::boolean,
						 (r->'bucket'->>'tat_us')::bigint, (r->'bucket'->>'interval_us')::bigint,
						 (r->'bucket'->>'lock_until_us')::bigint, (r->'bucket'->>'lock_us')::bigint,
						 now, (r->>'cost')::integer)
$$;

-- the SQLSTATE and message a call raises, or 'ok'
CREATE FUNCTION pg_temp.outcome(call text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	message text;
BEGIN
	EXECUTE call;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS message = MESSAGE_TEXT;
	RETURN SQLSTATE || ' ' || message;
END
$$;

CREATE TEMP TABLE limits AS
SELECT l, row_number() OVER () AS n FROM vectors, jsonb_array_elements(j->'limits') AS l;
CREATE TEMP TABLE lockouts AS
SELECT l, row_number() OVER () AS n FROM vectors, jsonb_array_elements(j->'lockout_limits') AS l;
CREATE TEMP TABLE steps AS
SELECT s->>'name' AS sequence, t.step, t.n
FROM vectors, jsonb_array_elements(j->'sequences') AS s,
	 jsonb_array_elements(s->'steps') WITH ORDINALITY AS t(step, n);
CREATE TEMP TABLE take_all AS
SELECT a FROM vectors, jsonb_array_elements(j->'take_all') AS a;

SELECT plan((SELECT count(*)::integer FROM limits) + (SELECT count(*)::integer FROM lockouts)
			+ 2 * (SELECT count(*)::integer FROM steps) + 2 * (SELECT count(*)::integer FROM take_all));

-- gcra_limit_init: T and tau, or the error it names
SELECT is(pg_temp.outcome(format('SELECT rl_sql_limit(%L::double precision, %s, 0, %s)',
								 l->>'rate', l->>'burst', l->>'now_us'))
		  || CASE WHEN l->>'error' = 'ok'
			 THEN (SELECT format(' %s %s', x.interval_us, x.tolerance_us)
				   FROM rl_sql_limit((l->>'rate')::double precision, (l->>'burst')::integer, 0,
									 (l->>'now_us')::bigint) AS x)
			 ELSE '' END,
		  CASE l->>'error'
			  WHEN 'ok' THEN format('ok %s %s', l->>'interval_us', l->>'tolerance_us')
			  WHEN 'bad_rate' THEN '22023 rate must be a finite number of requests per second above 0 and at most 1000000'
			  WHEN 'bad_burst' THEN '22023 burst must be at least 1'
			  WHEN 'tolerance_too_large' THEN '22023 burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range'
		  END,
		  format('limit %s: rate %s, burst %s', n, l->>'rate', l->>'burst'))
FROM limits ORDER BY n;

-- gcra_lockout_init: the longest lockout, or the error
SELECT is(pg_temp.outcome(format('SELECT rl_sql_limit(1, 1, 0, %s, %s, %L::double precision, %s)',
								 l->>'now_us', l->>'lockout_us', l->>'lockout_growth', l->>'lockout_max_us'))
		  || CASE WHEN l->>'error' = 'ok'
			 THEN (SELECT ' ' || x.lockout_max_us
				   FROM rl_sql_limit(1, 1, 0, (l->>'now_us')::bigint, (l->>'lockout_us')::bigint,
									 (l->>'lockout_growth')::double precision,
									 (l->>'lockout_max_us')::bigint) AS x)
			 ELSE '' END,
		  CASE l->>'error'
			  WHEN 'ok' THEN 'ok ' || (l->>'resolved_max_us')
			  WHEN 'bad_lockout' THEN '22023 lockout must be 1 second to 366 days, lockout_growth 1 to 100, and lockout_max from lockout to 366 days'
			  WHEN 'tolerance_too_large' THEN '22023 burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range'
		  END,
		  format('lockout %s: %s us, growth %s, max %s us', n, l->>'lockout_us', l->>'lockout_growth',
				 l->>'lockout_max_us'))
FROM lockouts ORDER BY n;

-- gcra_decide, step by step
SELECT is(pg_temp.decide(step, (step->>'now_us')::bigint), pg_temp.expected(step->'expect'),
		  format('%s, step %s: gcra_decide', sequence, n))
FROM steps ORDER BY sequence, n;

-- the same steps through rl_take_at, each against its bucket as stored:
-- the answer and the row it leaves (none when nothing is stored)
CREATE FUNCTION pg_temp.through_rl_take_at(step jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	b jsonb := step->'bucket';
	at timestamptz := rl_sql_time((step->>'now_us')::bigint);
	d rl_decision;
	row_after text;
BEGIN
	DELETE FROM rl_buckets;
	DELETE FROM rl_policies;
	IF (b->>'present')::boolean THEN
		INSERT INTO rl_buckets
		VALUES (rl_sql_key('vectors', 'key'), rl_sql_time((b->>'tat_us')::bigint),
				(b->>'interval_us')::bigint,
				CASE WHEN (b->>'lock_us')::bigint <> 0 THEN rl_sql_time((b->>'lock_until_us')::bigint) END,
				NULLIF((b->>'lock_us')::bigint, 0));
	END IF;
	IF (step->>'lockout_us')::bigint = 0 THEN
		d := rl_take_at('vectors', 'key', (step->>'rate')::double precision, (step->>'burst')::integer,
						(step->>'cost')::integer, at);
	ELSE
		INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max)
		VALUES ('vectors', (step->>'rate')::double precision, (step->>'burst')::integer,
				(step->>'lockout_us')::bigint * interval '1 microsecond',
				(step->>'lockout_growth')::double precision,
				NULLIF((step->>'lockout_max_us')::bigint, 0) * interval '1 microsecond');
		d := rl_take_at('vectors', 'key', (step->>'cost')::integer, at);
	END IF;
	SELECT format('%s %s %s', rl_sql_us(tat), interval_us, COALESCE(lock_us::text, '-'))
	INTO row_after FROM rl_buckets;
	RETURN format('%s %s %s %s | %s', d.allowed::text, d.remaining,
				  COALESCE(round(d.retry_after * 1e6)::bigint::text, 'NULL'),
				  round(d.reset_after * 1e6)::bigint, COALESCE(row_after, 'none'));
END
$$;

CREATE FUNCTION pg_temp.expected_through_sql(step jsonb) RETURNS text
LANGUAGE sql AS $$
	SELECT format('%s %s %s %s | %s', e->>'allowed', e->>'remaining',
				  CASE WHEN (e->>'allowed')::boolean THEN '0'
					   WHEN (e->>'retry_known')::boolean THEN e->>'retry_after_us' ELSE 'NULL' END,
				  e->>'reset_after_us',
				  CASE WHEN (e->>'store')::boolean
					   THEN format('%s %s %s', e->>'new_tat_us',
								   (pg_temp.limit_of(step, (step->>'now_us')::bigint)).interval_us,
								   COALESCE(NULLIF(e->>'new_lock_us', '0'), '-'))
					   WHEN (step->'bucket'->>'present')::boolean
					   THEN format('%s %s %s', step->'bucket'->>'tat_us', step->'bucket'->>'interval_us',
								   COALESCE(NULLIF(step->'bucket'->>'lock_us', '0'), '-'))
					   ELSE 'none' END)
	FROM (SELECT step->'expect' AS e) AS x
$$;

SELECT is(pg_temp.through_rl_take_at(step), pg_temp.expected_through_sql(step),
		  format('%s, step %s: rl_take_at', sequence, n))
FROM steps ORDER BY sequence, n;

-- gcra_decide_all and gcra_combine
SELECT is(rl_sql_decide_all(ARRAY(SELECT pg_temp.limit_of(r, (a->>'now_us')::bigint)
								  FROM jsonb_array_elements(a->'requests') AS r),
							ARRAY(SELECT (r->'bucket'->>'present')::boolean FROM jsonb_array_elements(a->'requests') AS r),
							ARRAY(SELECT (r->'bucket'->>'tat_us')::bigint FROM jsonb_array_elements(a->'requests') AS r),
							ARRAY(SELECT (r->'bucket'->>'interval_us')::bigint FROM jsonb_array_elements(a->'requests') AS r),
							ARRAY(SELECT (r->'bucket'->>'lock_until_us')::bigint FROM jsonb_array_elements(a->'requests') AS r),
							ARRAY(SELECT (r->'bucket'->>'lock_us')::bigint FROM jsonb_array_elements(a->'requests') AS r),
							(a->>'now_us')::bigint,
							ARRAY(SELECT (r->>'cost')::integer FROM jsonb_array_elements(a->'requests') AS r))::text,
		  ARRAY(SELECT pg_temp.expected(r->'expect') FROM jsonb_array_elements(a->'requests') AS r)::text,
		  format('take_all %s: gcra_decide_all', a->>'name'))
FROM take_all;
-- (the vectors' shadow requests as limits in shadow mode)
SELECT is((SELECT format('%s %s %s %s %s %s', c.allowed::text, c.remaining, c.retry_known::text, c.retry_after_us,
						 c.reset_after_us, c.binding - 1)
		   FROM rl_sql_combine(ARRAY(SELECT pg_temp.expected(r->'expect') FROM jsonb_array_elements(a->'requests') AS r),
							   ARRAY(SELECT (r->>'shadow')::boolean FROM jsonb_array_elements(a->'requests') AS r)) AS c),
		  format('%s %s %s %s %s %s', a->'expect'->>'allowed', a->'expect'->>'remaining',
				 a->'expect'->>'retry_known', a->'expect'->>'retry_after_us',
				 a->'expect'->>'reset_after_us', a->'expect'->>'binding'),
		  format('take_all %s: gcra_combine', a->>'name'))
FROM take_all;

SELECT * FROM finish();
ROLLBACK;
