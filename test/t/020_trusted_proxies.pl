# ratelimit.trusted_proxies beyond one session: ALTER SYSTEM refuses invalid
# and trust-all values, valid ones reach new sessions through reload, ALTER
# DATABASE and ALTER ROLE; a value set before the library was loaded is
# checked when it loads and, if refused, trusts nothing new; a hot standby
# answers; and with the library preloaded every SET is checked at once.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('trusted_proxies');
$node->init(allows_streaming => 1);
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE ROLE app LOGIN;
});

# the answer for a proxy at 10.0.0.1 (or $peer) relaying client 203.0.113.7
sub answer
{
	my (%opt) = @_;
	my $peer = $opt{peer} // '10.0.0.1';
	my $sql = ($opt{before} // '') .
	  "SELECT host(rl_client_ip('$peer', '203.0.113.7'))";
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		connstr => $node->connstr('postgres') . ' user=' . ($opt{user} // 'postgres'));
	return wantarray ? ($out, $err) : $out;
}

sub auto_conf
{
	return slurp_file($node->data_dir . '/postgresql.auto.conf');
}

# ALTER SYSTEM runs in a session that has loaded the library.
my ($ret, $out, $err) = $node->psql('postgres',
	q{LOAD 'ratelimit'; ALTER SYSTEM SET ratelimit.trusted_proxies = '0.0.0.0/0'});
isnt($ret, 0, 'ALTER SYSTEM refuses 0.0.0.0/0');
like($err, qr/invalid value for parameter "ratelimit.trusted_proxies": "0.0.0.0\/0"/,
	'with the usual message');
like($err, qr/would trust every address/, 'and a detail saying why');
($ret, $out, $err) = $node->psql('postgres',
	q{LOAD 'ratelimit'; ALTER SYSTEM SET ratelimit.trusted_proxies = '10.0.0.0/8, ::/64'});
isnt($ret, 0, 'ALTER SYSTEM refuses a range covering ::ffff:0:0/96');
like($err, qr/"::\/64" covers all of ::ffff:0:0\/96/, 'naming the entry');
unlike(auto_conf(), qr/trusted_proxies/, 'nothing was written to postgresql.auto.conf');

$node->safe_psql('postgres',
	q{LOAD 'ratelimit'; ALTER SYSTEM SET ratelimit.trusted_proxies = '10.0.0.0/8'});
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT current_setting('ratelimit.trusted_proxies', true) IS DISTINCT FROM ''
	  FROM (SELECT rl_ip_key('1.2.3.4')) AS loaded})
  or die 'reload did not apply';
is(answer(), '203.0.113.7', 'ALTER SYSTEM and reload: new sessions trust the proxy');
is(answer(user => 'app'), '203.0.113.7', 'for every role');

$node->safe_psql('postgres',
	q{LOAD 'ratelimit'; ALTER DATABASE postgres SET ratelimit.trusted_proxies = '192.0.2.0/24'});
is(answer(), '10.0.0.1', 'ALTER DATABASE ... SET overrides the system value');
is(answer(peer => '192.0.2.9'), '203.0.113.7', 'and trusts its own list');

$node->safe_psql('postgres',
	q{LOAD 'ratelimit'; ALTER ROLE app SET ratelimit.trusted_proxies = '198.51.100.0/24'});
is(answer(user => 'app', peer => '198.51.100.1'), '203.0.113.7',
	'ALTER ROLE ... SET applies to that role');
is(answer(peer => '198.51.100.1'), '198.51.100.1', 'and not to others');
$node->safe_psql('postgres', q{
	ALTER ROLE app RESET ratelimit.trusted_proxies;
	ALTER DATABASE postgres RESET ratelimit.trusted_proxies;
});

# A hot standby answers too: the functions read nothing but their arguments
# and the setting (here the ALTER SYSTEM value, copied with the backup).
$node->backup('for_standby');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'for_standby', has_streaming => 1);
$standby->start;
is($standby->safe_psql('postgres', q{
	SELECT concat_ws(' ',
		host(rl_client_ip('10.0.0.1', '203.0.113.7', '{10.0.0.0/8}')),
		host(rl_client_ip('10.0.0.1', '203.0.113.8')),
		host(rl_client_ip_forwarded('10.0.0.1', 'for=203.0.113.9', '{10.0.0.0/8}')),
		rl_ip_key('2001:db8:1:2::1'))
	WHERE pg_is_in_recovery()}),
	'203.0.113.7 203.0.113.8 203.0.113.9 2001:db8:1:2::/64',
	'on a hot standby every function of this section answers');
$standby->stop;

# Without the library loaded, PostgreSQL keeps a SET as a placeholder; the
# check runs when the library loads, and a refused value is dropped.
my $answer;
($answer, $err) = answer(
	before => q{SET ratelimit.trusted_proxies = '0.0.0.0/0'; },
	peer => '192.0.2.1');
is($answer, '192.0.2.1', 'a trust-all SET made before loading trusts no one new');
like($err, qr/WARNING:  invalid value for parameter "ratelimit.trusted_proxies"/,
	'and is reported when the library loads');
is(answer(before => q{SET ratelimit.trusted_proxies = '0.0.0.0/0'; }),
	'203.0.113.7', 'the value in force stays in force');

# Refused in postgresql.conf: a reload keeps the value in force.
$node->append_conf('postgresql.conf', q{ratelimit.trusted_proxies = '::/0'});
$node->reload;
is(answer(), '203.0.113.7', 'an invalid value in postgresql.conf is not applied');
is(answer(peer => '192.0.2.1'), '192.0.2.1', 'and trusts no one new');
$node->stop;

# Preloaded, the setting exists in every session: every SET is checked.
my $preloaded = PostgreSQL::Test::Cluster->new('preloaded');
$preloaded->init;
$preloaded->append_conf('postgresql.conf', q{shared_preload_libraries = 'ratelimit'});
$preloaded->start;
$preloaded->safe_psql('postgres', q{CREATE EXTENSION ratelimit});
($ret, $out, $err) = $preloaded->psql('postgres',
	q{SET ratelimit.trusted_proxies = '::ffff:0:0/96'});
isnt($ret, 0, 'preloaded: SET refuses trust-all in a fresh session');
like($err, qr/would trust every IPv4 address/, 'saying why');
($ret, $out, $err) = $preloaded->psql('postgres',
	q{ALTER DATABASE postgres SET ratelimit.trusted_proxies = 'junk'});
isnt($ret, 0, 'preloaded: ALTER DATABASE refuses junk in a fresh session');
($ret, $out, $err) = $preloaded->psql('postgres',
	q{ALTER SYSTEM SET ratelimit.trusted_proxies = '10.0.0.0/8'});
is($ret, 0, 'preloaded: ALTER SYSTEM takes a valid list without LOAD');
$preloaded->stop;

done_testing();
