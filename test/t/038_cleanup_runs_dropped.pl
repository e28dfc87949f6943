# rl_cleanup_runs keeps the last run of at most 1 000 databases per server
# (STATS_DATABASES in src/stats.c): once 1 000 databases have had a run and
# been dropped, their slots are given back and a new database's run is still
# recorded.
use strict;
use warnings;
use List::Util qw(min);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $slots = 1000;

my $node = PostgreSQL::Test::Cluster->new('runs');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.cleanup_interval = '1s'
});
$node->start;

# every database made from template1 has the extension (a template itself is
# not cleaned, so it takes no slot)
$node->safe_psql('template1', 'CREATE EXTENSION ratelimit');
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM rl_cleanup_runs() WHERE database = 'postgres'}),
	'the worker records its run in postgres');

# the other slots: databases that have a run and are dropped, a batch at a
# time (a file copy of template1 is the quickest way to make one); a batch
# is small enough for the worker to visit within one poll on a loaded machine
my $filled = 1;
for (my $batch = 1; $filled < $slots; $batch++)
{
	my @names = map { "fill_${batch}_$_" } 1 .. min(100, $slots - $filled);
	$node->safe_psql('postgres',
		join("\n", map { "CREATE DATABASE $_ STRATEGY FILE_COPY;" } @names));
	$node->poll_query_until('postgres', sprintf(q{
		SELECT count(*) = %d FROM rl_cleanup_runs() WHERE database LIKE 'fill\_%d\_%%'},
		scalar @names, $batch))
	  or die "the runs of batch $batch were not all recorded";
	$node->safe_psql('postgres',
		join("\n", map { "DROP DATABASE $_ WITH (FORCE);" } @names));
	$filled += @names;
}
is($filled, $slots, "$slots databases had a run, all but postgres dropped since");

$node->safe_psql('postgres', 'CREATE DATABASE fresh STRATEGY FILE_COPY');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM rl_cleanup_runs() WHERE database = 'fresh'}),
	'a new database gets its run recorded: the dropped ones gave their slots back');
is($node->safe_psql('postgres', 'SELECT string_agg(database, \',\' ORDER BY database) FROM rl_cleanup_runs()'),
	'fresh,postgres', 'rl_cleanup_runs shows the databases that exist');

$node->stop;
done_testing();
