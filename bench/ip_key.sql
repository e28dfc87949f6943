\set h random(1, 65535)
SELECT rl_ip_key(inet(concat_ws(chr(58), '2001', 'db8', to_hex(CAST(:h AS integer)), '2', '3', '4', '5', '6')), 64);
