# The memory store per database: the same limiter and key in two databases
# are two buckets; DROP EXTENSION forgets that database's buckets only; the
# cleanup worker frees expired slots and those of a dropped database, but not
# those of a database closed to connections or made a template.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_databases');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.memory_buckets = 1000
ratelimit.cleanup_interval = 1s
});
$node->start;
for my $db (qw(one two three))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION ratelimit');
}

sub take
{
	my ($db, $key) = @_;
	return $node->safe_psql($db,
		"SELECT allowed FROM rl_take('login', '$key', 0.001, 1)");
}

sub used
{
	return $node->safe_psql('one', 'SELECT memory_used FROM rl_store_status()');
}

is(take('one', 'ada'), 't', 'database one: allowed');
is(take('one', 'ada'), 'f', 'database one: spent');
is(take('two', 'ada'), 't', 'database two: the same limiter and key has its own budget');
is(take('two', 'ada'), 'f', 'database two: spent');
is($node->safe_psql('one', 'SELECT store, memory_slots, memory_used, table_buckets FROM rl_store_status()'),
	'memory|1008|2|0',
	'rl_store_status: the store, slots used of all slots (every database), none in rl_buckets');

$node->safe_psql('one', 'DROP EXTENSION ratelimit; CREATE EXTENSION ratelimit');
is(take('one', 'ada'), 't', 'after DROP and CREATE EXTENSION database one has its full budget');
is(take('two', 'ada'), 'f', 'while database two still has its bucket');

# a dropped database's buckets are freed by the worker
$node->safe_psql('three',
	q{SELECT rl_take('login', k::text, 0.001, 1) FROM generate_series(1, 100) k});
my $before = used();
cmp_ok($before, '>=', 101, "database three's 100 buckets are counted");
$node->safe_psql('postgres', 'DROP DATABASE three');
ok($node->poll_query_until('one', "SELECT memory_used <= $before - 100 FROM rl_store_status()"),
	"the worker freed database three's 100 slots after DROP DATABASE");

# the worker frees passed slots and counts them; rl_cleanup then finds none.
# The ten are decided at one clock, so they pass together, in one round.
my $offset = -s $node->logfile;
$node->safe_psql('two',
	q{SELECT rl_take_at('short', k::text, 1, 1, 1, now()) FROM generate_series(1, 10) k});
ok($node->wait_for_log(qr/ratelimit cleanup deleted 10 expired buckets in database "two"/, $offset),
	'the worker freed the 10 passed slots');
is($node->safe_psql('two', 'SELECT rl_cleanup()'), '0', 'rl_cleanup has nothing left to free');

# wait until a round of the worker began after now
sub wait_for_round
{
	my $run = $node->safe_psql('one', 'SELECT clock_timestamp()');
	for (1 .. 2)
	{
		$node->poll_query_until('one', qq{SELECT max(started) > '$run' FROM rl_cleanup_runs()
			WHERE database = 'one'}) or die 'no cleanup run';
		$run = $node->safe_psql('one', q{SELECT max(started) FROM rl_cleanup_runs()
			WHERE database = 'one'});
	}
}

# only a dropped database loses its buckets: not one closed to connections,
# nor a template
$node->safe_psql('postgres', 'CREATE DATABASE closed');
$node->safe_psql('closed', 'CREATE EXTENSION ratelimit');
$node->safe_psql('closed',
	q{SELECT rl_take('login', k::text, 0.001, 1) FROM generate_series(1, 100) k});
for my $change (['ALLOW_CONNECTIONS false', 'ALLOW_CONNECTIONS true'],
	['IS_TEMPLATE true', 'IS_TEMPLATE false'])
{
	$node->safe_psql('postgres', "ALTER DATABASE closed $change->[0]");
	wait_for_round();
	$node->safe_psql('postgres', "ALTER DATABASE closed $change->[1]");
	is($node->safe_psql('closed', q{SELECT count(*) FILTER (WHERE (rl_take('login', k::text, 0.001, 1)).allowed)
		FROM generate_series(1, 100) k}),
		'0', "after rounds of the worker with $change->[0], the 100 buckets are still spent");
}

$node->stop;
done_testing();
