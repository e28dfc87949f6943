# Durable limits (1.3): in both stores, a durable limiter's budget survives an
# immediate shutdown and a crash, which start every other budget full; a
# streaming standby has its rows, and a promoted standby goes on denying a
# key spent on the old primary; pg_dump carries the policy, never a bucket.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# one request per hour, burst 2: spent by two calls
my $policies = q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies (limiter, rate, burst, durable)
	VALUES ('kept', 1.0 / 3600, 2, true), ('lost', 1.0 / 3600, 2, false);
};

sub allowed
{
	my ($node, $limiter, $key) = @_;
	return $node->safe_psql('postgres',
		"SELECT allowed FROM rl_take('$limiter', '$key')");
}

sub spend
{
	my ($node, $key) = @_;
	allowed($node, $_, $key) for ('kept', 'kept', 'lost', 'lost');
}

for my $store ('table', 'memory')
{
	my $primary = PostgreSQL::Test::Cluster->new("primary_$store");
	$primary->init(allows_streaming => 1);
	$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = '$store'
restart_after_crash = on
});
	$primary->start;
	$primary->safe_psql('postgres', $policies);

	spend($primary, 'ada');
	is(allowed($primary, 'kept', 'ada') . allowed($primary, 'lost', 'ada'),
		'ff', "$store store: both budgets spent");

	$primary->stop('immediate');
	$primary->start;
	is(allowed($primary, 'kept', 'ada'), 'f',
		"$store store: a durable budget survives an immediate shutdown");
	is(allowed($primary, 'lost', 'ada'), 't',
		"$store store: another starts full");

	spend($primary, 'bob');
	my $crash_offset = -s $primary->logfile;
	my $victim = $primary->background_psql('postgres');
	kill 'KILL', $victim->query_safe('SELECT pg_backend_pid()');
	$primary->wait_for_log(qr/all server processes terminated; reinitializing/,
		$crash_offset);
	$primary->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back';
	eval { $victim->quit };
	is(allowed($primary, 'kept', 'bob'), 'f',
		"$store store: a durable budget survives a killed backend (crash recovery)");
	is(allowed($primary, 'lost', 'bob'), 't', "$store store: another starts full");

	# a standby has the rows; promoted, it denies what the old primary spent
	spend($primary, 'carol');
	$primary->backup("base_$store");
	my $standby = PostgreSQL::Test::Cluster->new("standby_$store");
	$standby->init_from_backup($primary, "base_$store", has_streaming => 1);
	$standby->start;
	spend($primary, 'dave');
	$primary->wait_for_catchup($standby);
	is( $standby->safe_psql('postgres',
			'SELECT count(*) FROM rl_buckets_durable'),
		$primary->safe_psql('postgres',
			'SELECT count(*) FROM rl_buckets_durable'),
		"$store store: the standby has every durable row");
	$primary->stop('immediate');
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the standby was not promoted';
	is( allowed($standby, 'kept', 'carol') . allowed($standby, 'kept', 'dave'),
		'ff',
		"$store store: the promoted standby denies keys spent on the old primary");
	is(allowed($standby, 'lost', 'dave'), 't',
		"$store store: and starts the others full");

	# buckets are state: a dump carries the policies and no bucket
	my $dump_file = $standby->basedir . '/dump.sql';
	$standby->command_ok(
		[ 'pg_dump', '-d', $standby->connstr('postgres'), '-f', $dump_file ],
		"$store store: pg_dump runs");
	my $dump = slurp_file($dump_file);
	like($dump, qr/COPY public\.rl_policies .*\nkept\t/s,
		"$store store: pg_dump carries the policies");
	unlike($dump, qr/rl_buckets/, "$store store: and no bucket table's rows");

	$standby->stop;
}

done_testing();
