-- Memory a backend keeps between calls stays flat however often the
-- database's functions change: each change invalidates the cached result
-- descriptor, and the next call must free the old one, not leak it.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;

SELECT plan(1);

CREATE FUNCTION cache_size() RETURNS bigint LANGUAGE sql
	AS $$SELECT total_bytes FROM pg_backend_memory_contexts WHERE name = 'CacheMemoryContext'$$;
CREATE TEMP TABLE churn (round integer, bytes bigint);

-- 5 000 function changes, each followed by a decision (a peek: nothing is
-- written); the size is taken after a warm-up round and after the last one
DO $$
BEGIN
	FOR i IN 1..5000 LOOP
		EXECUTE format('CREATE OR REPLACE FUNCTION churned() RETURNS integer LANGUAGE sql AS %L',
					   'SELECT ' || i);
		PERFORM rl_take('memory', 'k', 1, 1, 0);
		IF i IN (500, 5000) THEN
			INSERT INTO churn VALUES (i, cache_size());
		END IF;
	END LOOP;
END $$;

SELECT diag('growth: ' || (SELECT max(bytes) - min(bytes) FROM churn) || ' bytes');
SELECT cmp_ok((SELECT max(bytes) - min(bytes) FROM churn), '<', 1024 * 1024::bigint,
			  'CacheMemoryContext grows by less than 1 MB over 4 500 function changes');

SELECT * FROM finish();
ROLLBACK;
