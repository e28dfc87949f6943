-- Objects for the full memory store of bench/run: every slot holds a bucket
-- that stays live for hours, so the spread keys spill to rl_buckets and every
-- decision on them misses memory and is made in the table.
CREATE EXTENSION ratelimit;
SELECT count(*) FROM (SELECT rl_take('full', 'holder' || k, 0.0001, 1) FROM generate_series(1, 10 * current_setting('ratelimit.memory_buckets')::int) AS k) s;
SELECT count(*) FROM (SELECT rl_take('spread', 'user' || k, 10, 100) FROM generate_series(1, 100000) AS k) s;
DO $$
BEGIN
	IF (SELECT memory_used < memory_slots OR table_buckets < 100000 FROM rl_store_status()) THEN
		RAISE 'the memory store is not full: %', (SELECT row(s.*) FROM rl_store_status() s);
	END IF;
END $$;
VACUUM ANALYZE;
