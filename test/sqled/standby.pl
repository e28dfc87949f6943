# The SQL edition on a hot standby and after a crash: every function that
# decides or touches buckets refuses on the standby with SQLSTATE 25006
# naming itself, while the address functions work there; a crash of the
# primary empties rl_buckets and keeps rl_buckets_durable, so a durable
# limit still holds.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('sqled_primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE ROLE rl_sql_owner LOGIN');
$primary->safe_psql('postgres', 'GRANT CREATE ON SCHEMA public TO rl_sql_owner');
$primary->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $primary->connstr('postgres'),
	  '-U', 'rl_sql_owner', '-f', "$ENV{RL_SRC}/managed/ratelimit_sql--1.3.sql" ],
	'the SQL edition installs');
$primary->safe_psql('postgres', q{
	SET ROLE rl_sql_owner;
	INSERT INTO rl_policies (limiter, rate, burst) VALUES ('login', 1.0 / 3600, 1);
	INSERT INTO rl_policies (limiter, rate, burst, durable) VALUES ('reset', 1.0 / 3600, 1, true);
	SELECT rl_take('login', 'ada');
	SELECT rl_take('reset', 'ada');
});
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('sqled_standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

for my $call (
	q{SELECT rl_take('signup', 'ada', 1, 1)},
	q{SELECT rl_take_at('signup', 'ada', 1, 1, 1, now())},
	q{SELECT rl_take('reset', 'ada')},
	q{SELECT rl_take_at('reset', 'ada', 1, now())},
	q{SELECT rl_reset('login', 'ada')},
	q{SELECT rl_take_all(ARRAY['reset'], ARRAY['ada'])},
	q{SELECT rl_take_all_detail(ARRAY['signup'], ARRAY['ada'], ARRAY[1.0], ARRAY[1])},
	q{SELECT rl_refund('reset', 'ada')},
	q{SELECT rl_inspect('reset', 'ada')},
	q{SELECT rl_guard('reset', 'ada')},
	q{SELECT rl_cleanup()})
{
	my ($name) = $call =~ /SELECT (\w+)/;
	my ($ret, $out, $err) = $standby->psql('postgres',
		"SET ROLE rl_sql_owner;\n\\set VERBOSITY verbose\n$call");
	isnt($ret, 0, "$name fails on a standby");
	like($err, qr/25006: $name cannot run on a hot standby/,
		"$name says why, with SQLSTATE 25006");
}
is($standby->safe_psql('postgres',
		q{SELECT host(rl_client_ip('10.0.0.1', '203.0.113.7', '{10.0.0.0/8}')), rl_ip_key('2001:db8::1')}),
	'203.0.113.7|2001:db8::/64', 'the address functions work on a standby');
$standby->stop;

$primary->stop('immediate');
$primary->start;
is($primary->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'),
	'0', 'a crash empties rl_buckets');
is($primary->safe_psql('postgres',
		q{SET ROLE rl_sql_owner; SELECT allowed FROM rl_take('login', 'ada')}),
	't', 'so the unlogged limit starts afresh');
is($primary->safe_psql('postgres',
		q{SET ROLE rl_sql_owner; SELECT allowed FROM rl_take('reset', 'ada')}),
	'f', 'while the durable one still holds');

$primary->stop;
done_testing();
