\set k random(1, 100000)
SELECT * FROM rl_take_all(ARRAY['pair_ip', 'pair_account'], ARRAY['ip' || :k, 'user' || :k],
						  ARRAY[10, 10]::float8[], ARRAY[100, 100]);
