# One proxy database with ratelimit_proxy in front of two shard servers:
# decisions stay exact through the proxy, each key lives on the shard the
# documented hash names, keys spread evenly, the proxy answers as one server
# does, a shard that is down or silent fails only its own keys and works again
# when it is back, and bad cluster configurations fail clearly.  The 1.1
# shard functions (policies, rl_take_all, rl_refund, rl_headers) are tested
# through the proxy when the shards have them.
use strict;
use warnings;
use Digest::SHA qw(sha256);
use FindBin;
use lib $FindBin::Bin;
use Hammer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my @shards;
for my $i (0, 1)
{
	my $node = PostgreSQL::Test::Cluster->new("shard$i");
	$node->init;
	$node->append_conf('postgresql.conf', "max_connections = 60");
	$node->start;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		CREATE ROLE app LOGIN;
		CREATE DATABASE bare;
	});
	push @shards, $node;
}
# the same calls on a server of its own, to compare answers with
my $single = PostgreSQL::Test::Cluster->new('single');
$single->init;
$single->start;
$single->safe_psql('postgres', 'CREATE EXTENSION ratelimit; CREATE ROLE app LOGIN');

my $proxy = PostgreSQL::Test::Cluster->new('proxy');
$proxy->init;
$proxy->append_conf('postgresql.conf', "max_connections = 60");
$proxy->start;
$proxy->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app;
	CREATE EXTENSION ratelimit_proxy CASCADE;
	ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM app;
	CREATE TABLE outcome (limiter text, allowed boolean);
	GRANT INSERT ON outcome TO app;
});

sub connstr
{
	my ($node, $db) = @_;
	return sprintf("host=%s port=%d dbname=%s", $node->host, $node->port, $db // 'postgres');
}

# psql_error(NODE, SQL): the error the statement raised ('' when none)
sub psql_error
{
	my ($node, $sql, @opts) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, @opts);
	return $ret == 0 ? '' : $err;
}

sub proxy { return $proxy->safe_psql('postgres', shift); }

# Bad configuration: no cluster, then one PL/Proxy refuses.
like(psql_error($proxy, q{SELECT rl_take('a', 'b', 1, 5)}),
	qr/cluster not found: ratelimit/, 'without the server "ratelimit": an error naming it');
proxy(sprintf(q{
	CREATE SERVER ratelimit FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '%s', p1 '%s');
	CREATE USER MAPPING FOR PUBLIC SERVER ratelimit;
	GRANT USAGE ON FOREIGN SERVER ratelimit TO app;
}, connstr($shards[0]), connstr($shards[1])));
like(psql_error($proxy, sprintf(q{ALTER SERVER ratelimit OPTIONS (ADD p2 '%s')}, connstr($shards[1]))),
	qr/invalid number of partitions.*\n.*must be power of 2 \(attempted 3\)/,
	'three partitions without modular_mapping: PL/Proxy refuses them');

# keys(N, LIMITER, SHARD): N keys of LIMITER that the documented hash puts on
# SHARD of two: the first four bytes of SHA-256(limiter || 0x00 || key),
# big-endian, top bit cleared, modulo the partition count.
sub shard_of
{
	my ($limiter, $key) = @_;
	return (unpack('N', sha256("$limiter\0$key")) & 0x7fffffff) % 2;
}

sub keys_on
{
	my ($n, $limiter, $shard) = @_;
	my @found;
	for (my $i = 0; @found < $n; $i++)
	{
		push @found, "key$i" if shard_of($limiter, "key$i") == $shard;
	}
	return @found;
}
my ($on0) = keys_on(1, 'sign_in', 0);
my ($on1) = keys_on(1, 'sign_in', 1);

# A shard without the extension: the shard's error, naming the function.
proxy(sprintf(q{ALTER SERVER ratelimit OPTIONS (SET p1 '%s')}, connstr($shards[1], 'bare')));
like(psql_error($proxy, "SELECT rl_take('sign_in', '$on1', 1, 5)"),
	qr/REMOTE ERROR: function public\.rl_take\(text, text, double precision, integer, integer\) does not exist/,
	'a shard without ratelimit: the remote error names the missing function');
proxy(sprintf(q{ALTER SERVER ratelimit OPTIONS (SET p1 '%s')}, connstr($shards[1])));

is(proxy(q{SELECT string_agg(rl_shard_hash(l, k)::text, ',') FROM (VALUES
	('sign_in', 'ada@example.com'), ('', ''), ('sign_in', NULL), ('ü', 'ö')) v(l, k)}),
	join(',', map { unpack('N', sha256($_)) & 0x7fffffff }
		("sign_in\0ada\@example.com", "\0", "sign_in\0", "\xc3\xbc\0\xc3\xb6")),
	'rl_shard_hash is the documented hash (UTF-8, NULL as empty)');

# Exact: 30 connections on one key allow exactly the burst.
hammer($proxy, qq{
INSERT INTO outcome SELECT 'sign_in', (rl_take('sign_in', 'ada\@example.com', 0.001, 7)).allowed;
}, 3, 40, 10, 'app');
is(proxy(q{SELECT count(*) FILTER (WHERE allowed) || '/' || count(*) FROM outcome}),
	'7/1200', 'through the proxy, exactly the burst of 7 allowed out of 1200 decisions');
my $bucket = q{SELECT count(*) FROM rl_buckets WHERE key =
	sha256(convert_to('sign_in', 'UTF8') || '\x00'::bytea || convert_to('ada@example.com', 'UTF8'))};
my $home = shard_of('sign_in', 'ada@example.com');
is($shards[$home]->safe_psql('postgres', $bucket), '1', 'the bucket is on the shard the hash names');
is($shards[1 - $home]->safe_psql('postgres', $bucket), '0', 'and not on the other one');

# 10 000 keys spread within 10% of even.
proxy(q{SELECT count(rl_take('spread', 'user' || g, 100, 10)) FROM generate_series(1, 10000) g});
for my $i (0, 1)
{
	my $n = $shards[$i]->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets')
	  - ($i == $home ? 1 : 0);
	cmp_ok(abs($n - 5000), '<=', 500, "shard $i holds $n of the 10 000 keys, within 10% of even");
}

# The same answers as one server: a replay with an explicit clock, resets,
# the functions of the arguments alone, and errors with their SQLSTATEs.
proxy('GRANT EXECUTE ON FUNCTION rl_take_at(text, text, double precision, integer, integer, timestamptz), rl_reset(text, text) TO app');
$_->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION rl_take_at(text, text, double precision, integer, integer, timestamptz), rl_reset(text, text) TO app')
  for @shards;
my $replay = q{
	SELECT string_agg(format('%s %s', k, rl_take_at('replay', k, r, b, c,
		'2030-01-01 00:00:00+00'::timestamptz + t * interval '1 ms')), E'\n' ORDER BY t)
	FROM (VALUES ('ada', 2.0, 3, 1, 0), ('bob', 2.0, 3, 1, 1), ('ada', 2.0, 3, 2, 10),
		('ada', 2.0, 3, 1, 20), ('bob', 0.5, 1, 1, 30), ('bob', 0.5, 1, 0, 40),
		('ada', 1000000, 100, 100, 50), ('ada', 2.0, 3, 5, 600), ('eve', 2.0, 3, 0, 700),
		('ada', 2.0, 3, 1, 1700), ('bob', 4.0, 3, 1, 3000)) v(k, r, b, c, t);
	SELECT rl_reset('replay', 'ada'), rl_reset('replay', 'nobody');
	SELECT rl_take_at('replay', 'ada', 2.0, 3, 3, '2030-01-01 00:00:04+00');
	SELECT rl_client_ip('10.0.0.1', '203.0.113.7, 10.0.0.2', '{10.0.0.0/8}'),
		rl_client_ip_forwarded('10.0.0.1', 'for="[2001:db8::1]:443"', '{10.0.0.0/8}'),
		rl_ip_key('2001:db8:1:2:3::4'), rl_ip_key('192.0.2.1');
};
my $answers = $single->safe_psql('postgres', $replay);
is($proxy->safe_psql('postgres', "SET ROLE app; $replay"), $answers,
	'a replay through the proxy answers as one server');
ok(grep({ shard_of('replay', $_) == 0 } qw(ada bob eve))
	  && grep({ shard_of('replay', $_) == 1 } qw(ada bob eve)),
	'the replay used keys on both shards');
for my $bad (
	q{rl_take('sign_in', NULL, 1, 5)}, q{rl_take('', 'k', 1, 5)},
	q{rl_take('sign_in', 'k', 'NaN', 5)}, q{rl_take('sign_in', 'k', 1, 0)},
	q{rl_take('sign_in', 'k', 1, 5, -1)}, q{rl_ip_key('::1', 0)},
	q{rl_client_ip('10.0.0.1', '', '{0.0.0.0/0}')})
{
	my (undef, undef, $want) = $single->psql('postgres', "\\set VERBOSITY verbose\nSELECT $bad");
	my (undef, undef, $got) = $proxy->psql('postgres', "\\set VERBOSITY verbose\nSELECT $bad");
	my ($state) = $want =~ /ERROR:  (\w{5}):/;
	my ($message) = $want =~ /ERROR:  \w{5}: (.*)/;
	ok(defined $state && $got =~ /ERROR:  \Q$state\E: .*\Q$message\E/,
		"$bad: the same SQLSTATE and message through the proxy") or diag("$want\n$got");
}
like(psql_error($proxy, q{CREATE ROLE stranger; SET ROLE stranger; SELECT rl_reset('a', 'b')}),
	qr/permission denied for function rl_reset/, 'rl_reset stays revoked from PUBLIC on the proxy');
is($proxy->safe_psql('postgres', q{
	SELECT string_agg(p, ',' ORDER BY p) FROM unnest(ARRAY['rl_refund(text, text, integer)',
		'rl_proxy_refund_first(text[], text[], integer[])',
		'rl_proxy_taken()']) AS p
	WHERE has_function_privilege('app', p, 'EXECUTE')}), '',
	'default privileges granted at CREATE EXTENSION do not give a role the refunds');

# ask(SESSION, SQL): the output and the errors of SQL in a psql session
sub ask
{
	my ($session, $sql) = @_;
	$session->{stderr} = '';
	my $out = $session->query($sql);
	return ($out, $session->{stderr});
}

# A shard down: its keys fail at once with an error naming the connection,
# the other shard's keys are unaffected, and the same session works again
# once the shard is back.
my $session = $proxy->background_psql('postgres', on_error_stop => 0);
ask($session, 'SET client_min_messages = warning');
is((ask($session, "SELECT (rl_take('sign_in', '$on1', 0.001, 5)).allowed"))[0], 't',
	'a session decides on shard 1');
# a changed partition reaches the open session at its next call
proxy(sprintf(q{ALTER SERVER ratelimit OPTIONS (SET p1 '%s')}, connstr($shards[1], 'bare')));
like((ask($session, "SELECT rl_take('sign_in', '$on1', 0.001, 5)"))[1], qr/\[bare\] REMOTE ERROR/,
	'an open session follows ALTER SERVER at its next call');
proxy(sprintf(q{ALTER SERVER ratelimit OPTIONS (SET p1 '%s')}, connstr($shards[1])));
is((ask($session, "SELECT (rl_take('sign_in', '$on1', 0.001, 5)).remaining"))[0], '3',
	'and back to the shard, with the budget it had');
$shards[1]->stop;
my $started = time;
# PL/Proxy probes a connection idle for 2 seconds or more before using it: when
# the shutdown took that long, it finds the shard's farewell unread, drops the
# connection and reconnects, which is refused.  Either way the call fails,
# naming the connection.
like((ask($session, "SELECT rl_take('sign_in', '$on1', 0.001, 5)"))[1],
	qr/\[postgres\] (?:REMOTE FATAL: terminating connection due to administrator command|PQconnect\w*: connection to server .* failed)/,
	'shard 1 shut down: the call on its open connection fails, saying so');
like((ask($session, "SELECT rl_take('sign_in', '$on1', 0.001, 5)"))[1],
	qr/\[postgres\] PQconnect\w*: connection to server .* failed/,
	'shard 1 down: its key fails with the connection error');
cmp_ok(time - $started, '<', 60, 'at once (refused connections)');
is(join('|', ask($session, "SELECT (rl_take('sign_in', '$on0', 0.001, 5)).allowed")), 't|',
	'the key on shard 0 is unaffected');
$shards[1]->start;
is(join('|', ask($session, "SELECT (rl_take('sign_in', '$on1', 0.001, 5)).remaining")), '2|',
	'shard 1 back: the same session decides on it again, with the budget it had');

# A silent shard (its postmaster stopped, so connections hang): the key fails
# within the proxy's statement_timeout, the other shard still answers.
my $postmaster = $shards[1]->{_pid};
kill 'STOP', $postmaster;
my $silent = $proxy->background_psql('postgres', on_error_stop => 0);
ask($silent, q{SET client_min_messages = warning; SET statement_timeout = '2s'});
$started = time;
my (undef, $timeout_error) = ask($silent, "SELECT rl_take('sign_in', '$on1', 0.001, 5)");
my $waited = time - $started;
kill 'CONT', $postmaster;
like($timeout_error, qr/canceling statement due to statement timeout/,
	'a silent shard: its key fails by the statement_timeout');
cmp_ok($waited, '>=', 1.5, 'after waiting for it');
cmp_ok($waited, '<', 60, 'not for ever');
is(join('|', ask($silent, "SELECT (rl_take('sign_in', '$on0', 0.001, 5)).allowed")), 't|',
	'the key on the other shard is unaffected');
is(join('|', ask($silent, "SELECT (rl_take('sign_in', '$on1', 0.001, 5)).remaining")), '1|',
	'the shard answering again: its key works in the same session');
$silent->quit;
$session->quit;

# The 1.1 shard functions, through the proxy.
SKIP:
{
	skip 'the shards lack the 1.1 functions rl_refund, rl_take_all and policies', 35
	  unless $shards[0]->safe_psql('postgres',
		q{SELECT to_regprocedure('rl_refund(text, text, integer)') IS NOT NULL}) eq 't';

	for my $node (@shards, $single)
	{
		$node->safe_psql('postgres', q{
			INSERT INTO rl_policies VALUES ('login', 0.001, 3), ('ip', 0.001, 5);
			GRANT EXECUTE ON FUNCTION rl_refund(text, text, integer) TO app;
			CREATE ROLE taker LOGIN});
	}
	# taker may take through the proxy, never refund
	proxy(q{GRANT EXECUTE ON FUNCTION rl_refund(text, text, integer) TO app;
		CREATE ROLE taker; GRANT USAGE ON FOREIGN SERVER ratelimit TO taker});

	# the proxy serves the shards' policies to clients, with the same SQL
	my $policies = 'SELECT limiter, rate, burst, shadow FROM rl_policies ORDER BY limiter';
	is(proxy("SET ROLE taker; $policies"), $shards[0]->safe_psql('postgres', $policies),
		'SELECT ... FROM rl_policies on the proxy reads the shards\' policies');
	my ($l0, $l0b) = keys_on(2, 'login', 0);
	my ($l1) = keys_on(1, 'login', 1);
	my ($i0) = keys_on(1, 'ip', 0);
	my ($i1) = keys_on(1, 'ip', 1);

	my $policy = "SELECT (rl_take('login', '$l0')).remaining, (rl_take('login', '$l0', 2)).remaining,"
	  . " rl_refund('login', '$l0'), rl_take('login', '$l1', 0), rl_refund('login', 'never'),"
	  . " (rl_take('login', '$l0', 2)).allowed";
	is($proxy->safe_psql('postgres', "SET ROLE app; $policy"),
		$single->safe_psql('postgres', $policy),
		'policy rl_take and rl_refund answer as one server');

	# both pairs on one shard: the shard's own all or nothing
	is(proxy("SELECT (rl_take_all('{login,ip}', '{$l0,$i0}')).allowed"), 't',
		'rl_take_all with both pairs on shard 0');

	# pairs on two shards, shard 1 denying: shard 0 gets its cell back, by
	# the proxy owner's rights (taker may not refund)
	my $remaining = "SELECT (rl_take('ip', '$i0', 0)).remaining";
	my $before = proxy($remaining);
	proxy("SELECT rl_take('login', '$l1', 3)");
	is(proxy("SET ROLE taker; SELECT allowed, remaining, limiter FROM rl_take_all('{ip,login}', '{$i0,$l1}')"),
		'f|0|login', 'pairs on two shards, shard 1 denying: denied, bound by login');
	is(proxy($remaining), $before, 'the cell taken on shard 0 was given back');
	like(psql_error($proxy, "SET ROLE taker; SELECT rl_proxy_refund_taken(); SELECT rl_proxy_taken()"),
		qr/permission denied for function rl_proxy_taken/,
		'a role cannot read what the owner\'s refund would give back');
	like(psql_error($proxy, "BEGIN; SET LOCAL ROLE taker;"
		. " SELECT rl_proxy_take_part('rl_take_all', true, '{1}', '{ip}', '{$i0}', NULL, NULL, NULL);"
		. " SELECT rl_proxy_refund_taken(); SELECT rl_proxy_refund_taken(); COMMIT"), qr/^$/,
		'the owner\'s refund, called directly, gives back only a take of the same caller,'
		  . ' in the same transaction');
	is(proxy($remaining), $before, '... once: the cell it took, not one more');

	# a shadow pair answers allowed also when its would-be denial spent
	# nothing: the refund gives a shadow limiter nothing back, while the
	# enforced pair of the same shard gets its cell back
	$_->safe_psql('postgres', q{INSERT INTO rl_policies VALUES ('shadowed', 0.001, 1, true)})
	  for @shards;
	my ($s0) = keys_on(1, 'shadowed', 0);
	my $shadow_left = "SELECT (rl_take('shadowed', '$s0', 0)).remaining";
	is(proxy("SELECT allowed, remaining FROM rl_take('shadowed', '$s0')"), 't|0',
		'a shadow key spends its one cell');
	is(proxy("SET ROLE taker; SELECT allowed, limiter FROM rl_take_all('{shadowed,ip,login}', '{$s0,$i0,$l1}')"),
		'f|login', 'the shadow key denied in shadow with an ip key on shard 0, login denying on shard 1: denied');
	is(proxy($remaining), $before, 'the ip cell taken on shard 0 was given back');
	is(proxy($shadow_left), '0', 'the shadow key was given no cell: it had spent none');
	like(psql_error($proxy, "BEGIN; SET LOCAL ROLE taker;"
		. " SELECT rl_proxy_take_part('rl_take_all', true, '{1}', '{shadowed}', '{$s0}', NULL, NULL, NULL);"
		. " SELECT rl_proxy_refund_taken(); COMMIT"), qr/^$/,
		'a shadow key denied in shadow, taken and refunded directly');
	is(proxy($shadow_left), '0', '... is given no cell either');

	# a shard whose policies cannot be read when the refund asks which of its
	# pairs spent keeps its cells spent, with a warning, and the call is
	# answered (shard 0 decides by its policies, by column number, while the
	# refund's SELECT of shadow fails)
	$shards[0]->safe_psql('postgres', 'ALTER TABLE rl_policies RENAME COLUMN shadow TO hidden');
	my ($ret, $out, $warning) = $proxy->psql('postgres',
		"SET ROLE taker; SELECT allowed, limiter FROM rl_take_all('{ip,login}', '{$i0,$l1}')");
	is("$ret|$out", '0|f|login',
		'a shard that cannot be asked at the refund: the call is still answered, denied');
	like($warning, qr/WARNING:  ratelimit_proxy could not refund a part after a denied rl_take_all: .*(hidden|shadow)/,
		'... with a warning saying why');
	is(proxy($remaining), $before - 1, '... and that shard\'s cell stays spent');
	$shards[0]->safe_psql('postgres',
		"ALTER TABLE rl_policies RENAME COLUMN hidden TO shadow; SELECT rl_reset('ip', '$i0')");
	$before = proxy($remaining);

	# the cross-shard path runs with the caller's rights
	like(psql_error($proxy, "SET ROLE stranger; SELECT rl_take_all('{ip,ip}', '{$i0,$i1}')"),
		qr/permission denied for foreign server ratelimit/,
		'a role without USAGE on the server is refused a cross-shard rl_take_all too');
	is(proxy($remaining), $before, 'and nothing was spent');

	# a shard's error names the caller's element, not the shard's sub-array's
	my ($n1) = keys_on(1, 'nobody', 1);
	my $login_left = "SELECT (rl_take('login', '$l0', 0)).remaining";
	my $login_before = proxy($login_left);
	my (undef, undef, $err) = $proxy->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT rl_take_all('{login,ip,nobody}', '{$l0,$i1,$n1}')");
	like($err, qr/ERROR:  42704:.*limiter "nobody" has no policy.*element 3 of the arrays of rl_take_all\n/s,
		'an unknown policy on the second shard: element 3 of the caller\'s arrays');
	(undef, undef, $err) = $proxy->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT rl_take_all_detail('{login,ip,nobody}', '{$l0,$i1,$n1}')");
	like($err, qr/ERROR:  42704:.*element 3 of the arrays of rl_take_all_detail\n/s,
		'and rl_take_all_detail\'s error names rl_take_all_detail');
	is(proxy($login_left), $login_before, 'and the first shard\'s take was given back');

	# and allowed: each shard spends
	is(proxy("SELECT allowed, remaining, limiter FROM rl_take_all('{ip,login}', '{$i0,$l0b}', '{1,1}')"),
		't|2|login', 'pairs on two shards allowed: bound by the least remaining');
	is(proxy($remaining), $before - 1, 'and shard 0 spent its cell');

	# a backend's memory stays flat over allowed cross-shard calls of each
	# kind (they remember what they took until the call ends)
	$_->safe_psql('postgres', q{INSERT INTO rl_policies VALUES ('fast', 1000000, 1000)}) for @shards;
	my ($f0, $f1) = (keys_on(1, 'fast', 0), keys_on(1, 'fast', 1));
	my ($e0, $e1) = (keys_on(1, 'mem', 0), keys_on(1, 'mem', 1));
	my $leak = $proxy->background_psql('postgres');
	my $calls = sprintf(q{
		DO $$
		BEGIN
			FOR i IN 1 .. %%d LOOP
				PERFORM rl_take_all('{fast,fast}', '{%1$s,%2$s}');
				PERFORM rl_take_all_detail('{fast,fast}', '{%1$s,%2$s}');
				PERFORM rl_take_all('{mem,mem}', '{%3$s,%4$s}', '{1000000,1000000}', '{1000,1000}');
				PERFORM rl_take_all_detail('{mem,mem}', '{%3$s,%4$s}', '{1000000,1000000}', '{1000,1000}');
			END LOOP;
		END $$;
		SELECT sum(total_bytes) FROM pg_backend_memory_contexts;}, $f0, $f1, $e0, $e1);
	is($leak->query_safe(qq{SELECT allowed, limiter FROM rl_take_all_detail('{fast,fast}', '{$f0,$f1}')}),
		't|fast', 'a cross-shard call by policy, allowed');
	my $warm = $leak->query_safe(sprintf($calls, 50));
	my $after = $leak->query_safe(sprintf($calls, 500));
	$leak->quit;
	diag('growth: ' . ($after - $warm) . ' bytes');
	cmp_ok($after - $warm, '<', 256 * 1024,
		'2 000 allowed cross-shard calls grow the backend\'s memory by less than 256 kB');

	# explicit limits: the same decisions as one server for the same history
	is(join('', map { shard_of($_, 'k') } qw(a b c)), '101', 'a and c are on shard 1, b on shard 0');
	my $explicit = join(';', map { "SELECT allowed, remaining, retry_after IS NULL, limiter
		FROM rl_take_all('{a,b,c}', '{k,k,k}', '{0.001,0.001,0.001}', '{2,3,4}', '$_')" }
		  ('{1,1,1}', '{1,1,5}', '{0,2,0}', '{1,0,1}', '{0,0,0}'));
	is(proxy($explicit), $single->safe_psql('postgres', $explicit),
		'explicit rl_take_all across shards: the same decisions as one server');

	# rl_take_all_detail: the same answers as one server, each request's too,
	# on one shard (y, z) and across both (x, y, z); reset_after as the cells
	# in debt (T is 1000 s), which the seconds between the two runs leave alone
	is(join('', map { shard_of($_, 'k') } qw(x y z)), '011', 'x is on shard 0, y and z on shard 1');
	my $lx0 = (keys_on(3, 'login', 0))[2];
	my $ix1 = (keys_on(2, 'ip', 1))[1];
	my $each = q{(SELECT string_agg(concat_ws(':', r.allowed, r.remaining, r.retry_after IS NULL,
		ceil(r.reset_after / 1000)), ' ' ORDER BY r.i)
		FROM unnest(d.requests) WITH ORDINALITY AS r(allowed, remaining, retry_after, reset_after, i))};
	my $detail = join(';', map { "SELECT d.allowed, d.remaining, d.retry_after IS NULL, d.limiter, $each
		FROM rl_take_all_detail($_) AS d" }
		  ("'{y,z}', '{k,k}', '{0.001,0.001}', '{3,4}', '{1,2}'",
		   "'{x,y,z}', '{k,k,k}', '{0.001,0.001,0.001}', '{2,3,4}', '{1,1,1}'",
		   "'{z,y,x}', '{k,k,k}', '{0.001,0.001,0.001}', '{4,3,2}', '{1,1,5}'",
		   "'{x,y,z}', '{k,k,k}', '{0.001,0.001,0.001}', '{2,3,4}', '{0,2,0}'",
		   "'{y,x}', '{k,k}', '{0.001,0.001}', '{3,2}', '{1,1}'",
		   "'{login,ip}', '{$lx0,$ix1}'",
		   "'{ip,login}', '{$ix1,$lx0}', '{5,1}'",
		   "'{login,ip}', '{$lx0,$ix1}', '{0,0}'"));
	is(proxy($detail), $single->safe_psql('postgres', $detail),
		'rl_take_all_detail on one shard and across: the same answers as one server, each request\'s too');

	# refused calls spend nothing on any shard
	my $rows = 'SELECT count(*) FROM rl_buckets';
	my @counts = map { $_->safe_psql('postgres', $rows) } @shards;
	for my $bad (
		[ "rl_take_all('{ip,login}', '{$i1,$l0}', '{1,NULL}')", '22004' ],
		[ "rl_take_all('{ip,login,ip}', '{$i1,$l0,$i1}')", '22023' ],
		[ "rl_take_all('{ip,login}', '{$i1}')", '22023' ],
		[ "rl_take_all('{b,a}', '{k,k}', '{1,1}', '{0,5}')", '22023' ])
	{
		my (undef, undef, $err) = $proxy->psql('postgres', "\\set VERBOSITY verbose\nSELECT $bad->[0]");
		like($err, qr/ERROR:  $bad->[1]:/, "$bad->[0]: $bad->[1]");
	}
	is(join(',', map { $_->safe_psql('postgres', $rows) } @shards), join(',', @counts),
		'the refused calls wrote nothing on either shard');

	# a value refused by the second shard: the first one's take is given back
	is(join('', map { shard_of($_, 'k') } qw(e f)), '10', 'e is on shard 1, f on shard 0');
	my $e_left = "SELECT (rl_take('e', 'k', 0.001, 2, 0)).remaining";
	like(psql_error($proxy,
		"SELECT rl_take_all('{e,f}', '{k,k}', '{0.001,0.001}', '{2,2}', '{1,-1}')"),
		qr/cost/, 'a cost refused by the shard that decides it');
	is(proxy($e_left), '2', 'the other shard\'s take was given back');
}

SKIP:
{
	skip 'the shards lack rl_headers', 1
	  unless $shards[0]->safe_psql('postgres',
		q{SELECT to_regprocedure('rl_headers(rl_decision, text, double precision, integer)') IS NOT NULL})
	  eq 't';
	my $headers = q{SELECT rl_headers(rl_take_at('h', 'k', 1, 10, 3, '2030-01-01'), 'h', 1, 10)};
	is($proxy->safe_psql('postgres', $headers), $single->safe_psql('postgres', $headers),
		'rl_headers answers as one server');
}

# Lockouts (1.3) are the shards': each decides and locks its own keys, the
# proxy passes the answers on, and a cross-shard rl_take_all keeps the
# lockout that a denial started, refund or not.
SKIP:
{
	skip 'the shards lack the 1.3 lockouts', 16
	  unless $shards[0]->safe_psql('postgres',
		q{SELECT to_regprocedure('rl_take_at(text, text, integer, timestamptz)') IS NOT NULL}) eq 't';

	# one a day, two at once; then 10 minutes locked, doubling up to 30
	for my $node (@shards, $single)
	{
		$node->safe_psql('postgres', q{
			INSERT INTO rl_policies (limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max)
			VALUES ('pin', 1.0 / 86400, 2, false, '10 minutes', 2, '30 minutes'),
				('pin_shadow', 1.0 / 86400, 2, true, '10 minutes', 2, '30 minutes');
			GRANT EXECUTE ON FUNCTION rl_take_at(text, text, integer, timestamptz) TO app});
	}
	proxy('GRANT EXECUTE ON FUNCTION rl_take_at(text, text, integer, timestamptz) TO app');
	like(psql_error($proxy, q{SET ROLE stranger; SELECT rl_take_at('pin', 'k', 1, now())}),
		qr/permission denied for function rl_take_at/,
		'the policy form of rl_take_at is revoked from PUBLIC on the proxy');

	my $all = 'SELECT * FROM rl_policies ORDER BY limiter';
	is(proxy("SET ROLE app; $all"), $shards[1]->safe_psql('postgres', $all),
		'rl_policies on the proxy: the shards\' policies with their lockout columns');

	# A replay by the policy form of rl_take_at, a key on each shard: the
	# same answers as one server, with the lockout's rules in them.
	my ($p0) = keys_on(1, 'pin', 0);
	my ($p1) = keys_on(1, 'pin', 1);
	my $at = q{'2030-01-01 00:00:00+00'::timestamptz + t * interval '1 s'};
	my $pin_replay = qq{
		SELECT string_agg(format('%s %s %s', k, t, rl_take_at('pin', k, c, $at)), E'\\n' ORDER BY t, k)
		FROM (VALUES (0, 1), (1, 1), (2, 1), (102, 1), (200, 0), (300, 5), (700, 1), (2000, 1),
			(5600, 1)) AS v(t, c), (VALUES ('$p0'), ('$p1')) AS u(k)};
	my $replayed = $proxy->safe_psql('postgres', "SET ROLE app; $pin_replay");
	is($replayed, $single->safe_psql('postgres', $pin_replay),
		'a replay of lockouts by rl_take_at through the proxy answers as one server');
	my @retry = map { (split /,/)[2] } ($replayed =~ /^\Q$p1\E \d+ \((.*)\)$/mg);
	is(join(' ', @retry), '0 0 600 500 0 302 1200 1800 600',
		'... locked for the lockout, its remainder while locked (a peek allowed, a cost above'
		  . ' the burst answered), grown by 2, capped at 30 minutes, forgiven after as long');
	my $inspect = "SELECT store, tat, interval_us, lock_until, lock_us FROM rl_inspect('pin', '%s')";
	for my $k ($p0, $p1)
	{
		is($shards[shard_of('pin', $k)]->safe_psql('postgres', sprintf($inspect, $k)),
			$single->safe_psql('postgres', sprintf($inspect, $k)),
			"rl_inspect on the shard of $k: the lock state one server has");
	}
	my $after = qq{
		SELECT rl_headers(rl_take_at('pin', '$p1', 1, '2030-01-01 01:34:10+00'), 'pin');
		SELECT rl_reset('pin', '$p1');
		SELECT rl_take_at('pin', '$p1', 1, '2030-01-01 01:34:20+00')};
	my $headers = $proxy->safe_psql('postgres', "SET ROLE app; $after");
	is($headers, $single->safe_psql('postgres', $after),
		'rl_headers of a locked answer and rl_reset through the proxy answer as one server');

	# rl_take_all over both shards: a denial that starts a lockout on shard 1
	# denies the call, the lockout is written, shard 0 gets its cell back
	my ($a0, $w0) = (keys_on(3, 'pin', 0))[1, 2];
	my ($b1) = (keys_on(2, 'pin', 1))[1];
	my ($s0) = keys_on(1, 'pin_shadow', 0);
	proxy("SELECT rl_take('pin', '$b1', 2), rl_take('pin_shadow', '$s0', 2)");
	is(proxy("SET ROLE app; SELECT allowed, remaining, retry_after, limiter FROM rl_take_all('{pin,pin}', '{$a0,$b1}')"),
		'f|0|600|pin', 'a cross-shard rl_take_all whose request on shard 1 starts a lockout: denied, locked');
	is(proxy("SELECT (rl_take('pin', '$a0', 0)).remaining"), '2', '... shard 0\'s cell given back');
	my $locked = "SELECT lock_us, lock_until > now() + interval '590 s' FROM rl_inspect('pin', '$b1')";
	is($shards[1]->safe_psql('postgres', $locked), '600000000|t', '... the lockout written on shard 1');
	is(proxy("SELECT allowed, remaining, retry_after > 590 AND retry_after < 600 FROM rl_take('pin', '$b1')"),
		'f|0|t', '... and the key locked at its next call');

	# locked across shards, with a shadow key on shard 0 whose would-be
	# denial starts a shadow lockout: denied, each request's own answer, the
	# shadow lockout kept (the refund gives a shadow key nothing)
	is( proxy("SET ROLE app; SELECT d.allowed, d.limiter, d.retry_after > 590,"
			. " (SELECT string_agg(concat_ws(':', r.allowed, r.remaining, r.retry_after > 0), ' ' ORDER BY r.i)"
			. "  FROM unnest(d.requests) WITH ORDINALITY AS r(allowed, remaining, retry_after, reset_after, i))"
			. " FROM rl_take_all_detail('{pin,pin_shadow,pin}', '{$a0,$s0,$b1}') AS d"),
		'f|pin|t|t:2:f t:0:f f:0:t',
		'rl_take_all_detail across shards with a locked key: denied by it, each request\'s own answer');
	is(proxy("SELECT (rl_take('pin', '$a0', 0)).remaining"), '2', '... shard 0\'s cell given back');
	is($shards[0]->safe_psql('postgres', "SELECT lock_us FROM rl_inspect('pin_shadow', '$s0')"),
		'600000000', '... the shadow lockout started on shard 0 kept');

	# a denial in the window between a take and its refund starts a lockout:
	# the refund gives the cell back and the lockout stays
	proxy("SELECT rl_take('pin', '$w0')");
	is( proxy("BEGIN;"
			. " SELECT (rl_proxy_take_part('rl_take_all', true, '{1}', '{pin}', '{$w0}', NULL, NULL, NULL)).remaining;"
			. " SELECT retry_after FROM rl_take('pin', '$w0');"
			. " SELECT rl_proxy_refund_taken(); COMMIT;"
			. " SELECT allowed, retry_after > 590 FROM rl_take('pin', '$w0')"),
		"0\n600\n\nf|t", 'a lockout started between a cross-shard take and its refund');
	is($shards[0]->safe_psql('postgres',
			"SELECT lock_us, lock_until > now() + interval '590 s', tat < now() + interval '1 day' FROM rl_inspect('pin', '$w0')"),
		'600000000|t|t', '... stays after the refund, which gave the cell back');
}

# Durable limits (1.3) are the shards' too: a durable policy on the shards
# decides in each shard's rl_buckets_durable, through the proxy unchanged.
SKIP:
{
	skip 'the shards lack the 1.3 durable limits', 5
	  unless $shards[0]->safe_psql('postgres',
		q{SELECT to_regclass('rl_buckets_durable') IS NOT NULL}) eq 't';
	$_->safe_psql('postgres', q{
		INSERT INTO rl_policies (limiter, rate, burst, durable) VALUES ('kept', 1.0 / 86400, 2, true)})
	  for @shards;
	my ($k0) = keys_on(1, 'kept', 0);
	my ($k1) = keys_on(1, 'kept', 1);
	is(proxy("SET ROLE app; SELECT durable FROM rl_policies WHERE limiter = 'kept'"), 't',
		'rl_policies on the proxy says which policies are durable');
	is(join(' ', map { proxy("SET ROLE app; SELECT allowed FROM rl_take('kept', '$_', 2)") } ($k0, $k0)),
		't f', 'a durable limiter through the proxy: its burst, then denied');
	is($shards[0]->safe_psql('postgres',
			"SELECT store, (SELECT count(*) FROM rl_buckets_durable) FROM rl_inspect('kept', '$k0')"),
		'durable|1', '... decided in its shard\'s rl_buckets_durable');
	is(proxy("SET ROLE app; SELECT allowed, limiter FROM rl_take_all('{kept,kept}', '{$k1,$k0}')"),
		'f|kept', 'a cross-shard rl_take_all denied by the spent durable key');
	is($shards[1]->safe_psql('postgres', "SELECT (rl_take('kept', '$k1', 0)).remaining"),
		'2', '... and nothing of the other shard\'s durable key spent');
}

$_->stop for ($proxy, $single, @shards);
done_testing();
