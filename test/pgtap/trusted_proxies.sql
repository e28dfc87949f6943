-- The setting ratelimit.trusted_proxies: empty by default, superuser-only,
-- refused at SET time when invalid or trust-all, and followed by the
-- two-argument rl_client_ip.  (ALTER SYSTEM, new sessions and preloading are
-- in test/t/020_trusted_proxies.pl.)
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;
-- the setting exists once the library is loaded; only then is a SET checked
LOAD 'ratelimit';

SELECT plan(36);

SELECT is(current_setting('ratelimit.trusted_proxies'), '', 'empty by default');
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7'), '10.0.0.1', 'empty trusts nobody');
SELECT is((SELECT context FROM pg_settings WHERE name = 'ratelimit.trusted_proxies'),
		  'superuser', 'superuser-only (PGC_SUSET)');

SET LOCAL ratelimit.trusted_proxies = '10.0.0.0/8, 2001:db8::/32';
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7'), '203.0.113.7', 'the two-argument form follows SET');
SELECT is(rl_client_ip('2001:db8::1', '198.51.100.7, 10.0.0.2'), '198.51.100.7',
		  'every range of the list is trusted');
SELECT is(rl_client_ip('192.0.2.1', '203.0.113.7'), '192.0.2.1', 'an untrusted peer keeps its address');
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7, junk'), '10.0.0.1', 'the same rules as the three-argument form');
SELECT is(rl_client_ip(NULL, '203.0.113.7'), NULL, 'NULL remote answers NULL');
SELECT is(rl_client_ip('10.0.0.1', NULL), '10.0.0.1', 'NULL xff answers the peer');

SET LOCAL ratelimit.trusted_proxies = '192.0.2.0/24';
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7'), '10.0.0.1', 'a new value replaces the old one');
SELECT is(rl_client_ip('192.0.2.9', '203.0.113.7'), '203.0.113.7', 'and is followed at once');

SET LOCAL ratelimit.trusted_proxies = '10.0.0.0/8', '::ffff:192.168.0.0/112', '2001:db8::5';
SELECT is(current_setting('ratelimit.trusted_proxies'), '10.0.0.0/8, ::ffff:192.168.0.0/112, 2001:db8::5',
		  'SET takes a list of values');
SELECT is(rl_client_ip('192.168.7.7', '203.0.113.7'), '203.0.113.7', 'a mapped range trusts its IPv4 range');
SELECT is(rl_client_ip('2001:db8::5', '203.0.113.7'), '203.0.113.7', 'a bare address is a host range');
SELECT is(rl_client_ip('2001:db8::6', '203.0.113.7'), '2001:db8::6', 'and trusts nothing else');

SET LOCAL ratelimit.trusted_proxies = ' 10.0.0.0/8 ,	192.0.2.1 ';
SELECT is(rl_client_ip('192.0.2.1', '203.0.113.7'), '203.0.113.7', 'spaces and tabs around entries are allowed');

-- Refused when set; the value in force stays.
CREATE FUNCTION pg_temp.refused(value text, why text) RETURNS SETOF text
LANGUAGE sql AS $$
	SELECT throws_ok(format('SET ratelimit.trusted_proxies = %L', value), '22023',
					 format('invalid value for parameter "ratelimit.trusted_proxies": "%s"', value),
					 format('SET refuses %L: %s', value, why))
$$;
SELECT pg_temp.refused('0.0.0.0/0', 'IPv4 trust-all');
SELECT pg_temp.refused('::/0', 'IPv6 trust-all');
SELECT pg_temp.refused('::ffff:0:0/96', 'trusts every IPv4 address');
SELECT pg_temp.refused('::/64', 'covers the mapped range');
SELECT pg_temp.refused('10.0.0.0/8, 0.0.0.0/0', 'one trust-all entry among valid ones');
SELECT pg_temp.refused('junk', 'not an address');
SELECT pg_temp.refused('10.0.0.1/8', 'bits right of the prefix');
SELECT pg_temp.refused('10.0.0.0/33', 'prefix too long');
SELECT pg_temp.refused('10/8', 'an abbreviated address');
SELECT pg_temp.refused('10.0.0.0/8,', 'an empty entry');
SELECT pg_temp.refused('10.0.0.0/8; 192.0.2.0/24', 'not comma-separated');
SELECT pg_temp.refused('fe80::1%eth0', 'a zone');
SELECT is(current_setting('ratelimit.trusted_proxies'), ' 10.0.0.0/8 ,	192.0.2.1 ',
		  'a refused value leaves the setting as it was');
SELECT throws_ok($$SELECT set_config('ratelimit.trusted_proxies', '::/0', true)$$, '22023', NULL,
				 'set_config() is refused the same way');
SELECT throws_ok(format('ALTER DATABASE %I SET ratelimit.trusted_proxies = %L',
						current_database(), '0.0.0.0/0'),
				 '22023', NULL, 'ALTER DATABASE ... SET refuses trust-all');

CREATE ROLE rl_ip_app;
SELECT throws_ok($$ALTER ROLE rl_ip_app SET ratelimit.trusted_proxies = '::ffff:0:0/96'$$,
				 '22023', NULL, 'ALTER ROLE ... SET refuses trust-all');
SELECT lives_ok($$ALTER ROLE rl_ip_app SET ratelimit.trusted_proxies = '10.0.0.0/8'$$,
				'ALTER ROLE ... SET takes a valid list');

-- Only superusers set it; every role may read it and call the function.
SET LOCAL ROLE rl_ip_app;
SELECT throws_ok($$SET ratelimit.trusted_proxies = '10.0.0.0/8'$$, '42501',
				 'permission denied to set parameter "ratelimit.trusted_proxies"',
				 'a non-superuser cannot SET it');
SELECT is(current_setting('ratelimit.trusted_proxies'), ' 10.0.0.0/8 ,	192.0.2.1 ',
		  'a non-superuser can read it');
SELECT is(rl_client_ip('192.0.2.1', '203.0.113.7'), '203.0.113.7',
		  'the two-argument form works for a non-superuser');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
