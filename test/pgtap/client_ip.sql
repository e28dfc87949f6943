-- rl_client_ip and rl_client_ip_forwarded: every vector of
-- test/vectors/client_ip.tsv (columns: function, remote, header, trusted,
-- expected answer or "ERROR sqlstate", description; each expected answer
-- written by hand from the rules of the design's "Trusted proxies"), then
-- megabyte headers, long chains, error messages and declared properties.
-- Run from the top of the source tree (test/run does).
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS ratelimit;

CREATE TEMP TABLE vectors (
	n serial,
	fn text NOT NULL CHECK (fn IN ('rl_client_ip', 'rl_client_ip_forwarded')),
	remote inet,
	header text,
	trusted cidr[],
	expected text,
	description text NOT NULL
);
\copy vectors (fn, remote, header, trusted, expected, description) FROM 'test/vectors/client_ip.tsv'

SELECT plan(118 + 26);

SELECT is(count(*)::int, 118, 'all 118 vectors are loaded') FROM vectors;

SELECT CASE
	WHEN expected LIKE 'ERROR %' THEN
		throws_ok(format('SELECT %I(%L::inet, %L::text, %L::cidr[])',
						 fn, remote, header, trusted),
				  substr(expected, 7), NULL, description)
	WHEN fn = 'rl_client_ip' THEN
		is(rl_client_ip(remote, header, trusted), expected::inet, description)
	ELSE
		is(rl_client_ip_forwarded(remote, header, trusted), expected::inet, description)
	END
FROM vectors
ORDER BY n;

-- Headers of a megabyte and more: the answer is near the right end.
SELECT is(rl_client_ip('10.0.0.1', repeat('198.51.100.7, ', 80000) || '203.0.113.7, 10.0.0.2',
					   '{10.0.0.0/8}'),
		  '203.0.113.7', '1 MB header: the first untrusted entry from the right');
SELECT is(rl_client_ip('10.0.0.1', repeat('x', 1048576) || ', 203.0.113.7, 10.0.0.2',
					   '{10.0.0.0/8}'),
		  '203.0.113.7', '1 MB of junk left of the answer is not reached');
SELECT is(rl_client_ip('10.0.0.1', repeat('x', 1048576) || ', 10.0.0.2', '{10.0.0.0/8}'),
		  '10.0.0.2', 'a 1 MB entry is too long: the trusted hop right of it answers');
SELECT is(rl_client_ip('10.0.0.1', repeat('1', 1048576), '{10.0.0.0/8}'),
		  '10.0.0.1', 'a 1 MB entry of digits is too long');
SELECT is(rl_client_ip('10.0.0.1', repeat(', ', 524288) || chr(9), '{10.0.0.0/8}'),
		  '10.0.0.1', '1 MB of empty entries answers the peer');
SELECT is(rl_client_ip('10.0.0.1', repeat('10.1.2.3, ', 110000) || '10.0.0.2', '{10.0.0.0/8}'),
		  '10.1.2.3', '1 MB of trusted entries: the walk stops after 64 of them');
SELECT is(rl_client_ip_forwarded('10.0.0.1',
								 repeat('for=198.51.100.7;proto=https, ', 40000) || 'for=203.0.113.7',
								 '{10.0.0.0/8}'),
		  '203.0.113.7', 'Forwarded: 1 MB header');
SELECT is(rl_client_ip_forwarded('10.0.0.1', repeat('for="x, ', 131072) || 'for=10.0.0.2',
								 '{10.0.0.0/8}'),
		  '10.0.0.2', 'Forwarded: 1 MB of unterminated quotes stops at the trusted hop');

-- Long chains of trusted proxies: 10.0.1.1 (leftmost) to 10.0.1.N.
CREATE TEMP TABLE chains AS
SELECT hops,
	   (SELECT string_agg('10.0.1.' || i, ', ' ORDER BY i) FROM generate_series(1, hops) i) AS xff,
	   (SELECT string_agg('for=10.0.1.' || i, ', ' ORDER BY i) FROM generate_series(1, hops) i) AS fwd
FROM (VALUES (63), (64), (100)) AS h(hops);

SELECT is(rl_client_ip('10.0.0.1', xff, '{10.0.0.0/8}'), '10.0.1.37',
		  '100 trusted hops: the answer is the 64th from the right')
FROM chains WHERE hops = 100;
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7, ' || xff, '{10.0.0.0/8}'), '10.0.1.37',
		  'a client left of 100 trusted hops is not reached')
FROM chains WHERE hops = 100;
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7, ' || xff, '{10.0.0.0/8}'), '10.0.1.1',
		  'a client left of 64 trusted hops is not reached')
FROM chains WHERE hops = 64;
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7, ' || xff, '{10.0.0.0/8}'), '203.0.113.7',
		  'a client left of 63 trusted hops is reached')
FROM chains WHERE hops = 63;
SELECT is(rl_client_ip_forwarded('10.0.0.1', fwd, '{10.0.0.0/8}'), '10.0.1.37',
		  'Forwarded: 100 trusted hops answer the 64th from the right')
FROM chains WHERE hops = 100;

-- Messages name the argument and the refused range.
SELECT throws_ok($$SELECT rl_client_ip('10.0.0.1', '203.0.113.7', '{10.0.0.0/8,NULL}')$$,
				 '22023', 'trusted must not contain NULL', 'a NULL element: the message');
SELECT throws_ok($$SELECT rl_client_ip('10.0.0.1', '203.0.113.7', '{0.0.0.0/0}')$$,
				 '22023', 'trusted must not contain 0.0.0.0/0', '/0: the message');
SELECT throws_ok($$SELECT rl_client_ip_forwarded(NULL, NULL, '{::ffff:0.0.0.0/96}')$$,
				 '22023', 'trusted must not contain ::ffff:0.0.0.0/96',
				 'the mapped range: the message');

-- The answer is a host address; its text shows the mask, host() does not.
SELECT is(rl_client_ip('192.0.2.1/24', NULL, NULL)::text, '192.0.2.1/32',
		  'the answer''s ::text shows /32');
SELECT is(host(rl_client_ip('192.0.2.1/24', NULL, NULL)), '192.0.2.1',
		  'host() of the answer is the bare address');
SELECT is(rl_client_ip('10.0.0.1', '[2001:db8::7]:443', '{10.0.0.0/8}')::text,
		  '2001:db8::7/128', 'an IPv6 answer is a /128');

-- Declared properties.
SELECT is(array_agg(p.oid::regprocedure::text || ' ' || p.provolatile::text || p.proparallel::text ||
					CASE WHEN p.proisstrict THEN ' strict' ELSE '' END
					ORDER BY p.oid::regprocedure::text),
		  ARRAY['rl_client_ip(inet,text) ss',
				'rl_client_ip(inet,text,cidr[]) is',
				'rl_client_ip_forwarded(inet,text,cidr[]) is',
				'rl_ip_key(inet,integer) is strict'],
		  'volatility, parallel safety and strictness as the contract writes them')
FROM pg_proc p
WHERE p.proname IN ('rl_client_ip', 'rl_client_ip_forwarded', 'rl_ip_key');

CREATE ROLE rl_ip_caller;
SET LOCAL ROLE rl_ip_caller;
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7', '{10.0.0.0/8}'), '203.0.113.7',
		  'any role may call rl_client_ip');
SELECT is(rl_client_ip('10.0.0.1', '203.0.113.7'), '10.0.0.1',
		  'any role may call the two-argument form');
SELECT is(rl_client_ip_forwarded('10.0.0.1', 'for=203.0.113.7', '{10.0.0.0/8}'), '203.0.113.7',
		  'any role may call rl_client_ip_forwarded');
SELECT is(rl_ip_key('2001:db8::1'), '2001:db8::/64', 'any role may call rl_ip_key');
RESET ROLE;

-- IMMUTABLE: usable in an index expression.
CREATE TEMP TABLE requests (peer inet, xff text);
SELECT lives_ok($$CREATE INDEX ON requests (rl_client_ip(peer, xff, '{10.0.0.0/8}'))$$,
				'rl_client_ip can be indexed');

SELECT * FROM finish();
ROLLBACK;
