# rl_buckets is unlogged: a hot standby refuses the writing functions with a
# clear error, and a crash of the primary empties the table.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies VALUES ('login', 1.0 / 3600, 1);
	SELECT rl_take('login', 'ada');
	SELECT rl_take('login', 'bob');
});
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

for my $call (
	q{SELECT rl_take('signup', 'ada', 1, 1)},
	q{SELECT rl_take_at('signup', 'ada', 1, 1, 1, now())},
	q{SELECT rl_reset('login', 'ada')},
	q{SELECT rl_take('login', 'ada')},
	q{SELECT rl_take_all(ARRAY['login'], ARRAY['ada'])},
	q{SELECT rl_take_all(ARRAY['signup'], ARRAY['ada'], ARRAY[1.0], ARRAY[1])},
	q{SELECT rl_refund('login', 'ada')},
	q{SELECT rl_cleanup()})
{
	my ($name) = $call =~ /SELECT (\w+)/;
	my ($ret, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$call");
	isnt($ret, 0, "$name fails on a standby");
	like($err, qr/25006: $name cannot run on a hot standby/,
		"$name says why, with SQLSTATE 25006");
}

$standby->stop;

is($primary->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'),
	'2', 'two buckets before the crash');
$primary->stop('immediate');
$primary->start;
is($primary->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'),
	'0', 'a crash empties rl_buckets');
is($primary->safe_psql('postgres',
		q{SELECT allowed FROM rl_take('login', 'ada')}),
	't', 'and rl_take works with the full budget');
is($primary->safe_psql('postgres',
		q{SELECT allowed FROM rl_take('login', 'ada')}),
	'f', 'and counts again');

$primary->stop;
done_testing();
