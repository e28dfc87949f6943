-- rl_ip_key(ip, ipv6_prefix): IPv4 as its dotted address, IPv6 masked to the
-- prefix and written in RFC 5952 form with the prefix length.  Expected keys
-- are written by hand.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;

SELECT plan(25);

SELECT is(rl_ip_key('203.0.113.7'), '203.0.113.7', 'IPv4: the dotted address');
SELECT is(rl_ip_key('203.0.113.7/24'), '203.0.113.7', 'IPv4 with a netmask: the host part');
SELECT is(rl_ip_key('203.0.113.7', 1), '203.0.113.7', 'the prefix is ignored for IPv4');
SELECT is(rl_ip_key('::ffff:203.0.113.7'), '203.0.113.7', 'IPv4-mapped: the dotted IPv4 address');
SELECT is(rl_ip_key('::ffff:cb00:7107', 128), '203.0.113.7', 'IPv4-mapped is judged by its bits');
SELECT is(rl_ip_key('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::/64', 'IPv6: /64 by default');
SELECT is(rl_ip_key('2001:db8:1:2::1'), rl_ip_key('2001:db8:1:2:ffff:ffff:ffff:ffff'),
		  'two hosts of one /64 share a key');
SELECT isnt(rl_ip_key('2001:db8:1:2::1'), rl_ip_key('2001:db8:1:3::1'),
			'neighbouring /64s do not');
SELECT is(rl_ip_key('2001:db8:1:2:3:4:5:6', 48), '2001:db8:1::/48', '/48');
SELECT is(rl_ip_key('2001:db8:1:ab12::', 56), '2001:db8:1:ab00::/56', '/56 cuts inside a group');
SELECT is(rl_ip_key('2001:db8:1:2:3:4:5:6', 128), '2001:db8:1:2:3:4:5:6/128', '/128 keeps the address');
SELECT is(rl_ip_key('2001:db8:1:2:3:4:5:6', 1), '::/1', '/1');
SELECT is(rl_ip_key('8000::1', 1), '8000::/1', '/1 of the upper half');
SELECT is(rl_ip_key('2001:db8:1:2:3:4:5:6/32'), '2001:db8:1:2::/64',
		  'IPv6 with a netmask: the host part, then the prefix');
SELECT is(rl_ip_key('2001:0DB8:0000:0000:0001:0000:0000:0001', 128), '2001:db8::1:0:0:1/128',
		  'RFC 5952: lower case, the first longest run of zeros shortened');
SELECT is(rl_ip_key('2001:db8:0:1:1:1:1:1', 128), '2001:db8:0:1:1:1:1:1/128',
		  'RFC 5952: a single zero group is not shortened');
SELECT is(rl_ip_key('64:ff9b::cb00:7107', 128), '64:ff9b::cb00:7107/128', 'NAT64 stays IPv6');
SELECT is(rl_ip_key('::10.0.0.1', 128), '::a00:1/128', 'IPv4-compatible stays IPv6');
SELECT is(rl_ip_key(NULL), NULL, 'NULL ip: NULL (STRICT)');
SELECT is(rl_ip_key('2001:db8::1', NULL), NULL, 'NULL prefix: NULL (STRICT)');
SELECT throws_ok($$SELECT rl_ip_key('2001:db8::1', 0)$$, '22023',
				 'ipv6_prefix must be between 1 and 128, not 0', 'prefix 0 is refused');
SELECT throws_ok($$SELECT rl_ip_key('2001:db8::1', 129)$$, '22023',
				 'ipv6_prefix must be between 1 and 128, not 129', 'prefix 129 is refused');
SELECT throws_ok($$SELECT rl_ip_key('2001:db8::1', -64)$$, '22023',
				 'ipv6_prefix must be between 1 and 128, not -64', 'a negative prefix is refused');
SELECT throws_ok($$SELECT rl_ip_key('203.0.113.7', 0)$$, '22023',
				 'ipv6_prefix must be between 1 and 128, not 0',
				 'the prefix is checked for IPv4 too');
SELECT is(rl_ip_key(rl_client_ip('10.0.0.1', '2001:db8:1:2::99', '{10.0.0.0/8}')),
		  '2001:db8:1:2::/64', 'composes with rl_client_ip');

SELECT * FROM finish();
ROLLBACK;
