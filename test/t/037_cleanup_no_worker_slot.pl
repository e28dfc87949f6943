# With max_worker_processes too low for the cleanup launcher, the server still
# starts, and the extension says in one LOG line of its own that its worker
# will not run (PostgreSQL's own line does not name the worker it refused).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('noslot');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
max_worker_processes = 0
});
$node->start;

my $log = slurp_file($node->logfile);
my @lines = $log =~ /^.*LOG:  ratelimit cleanup worker .*$/mg;
is(scalar(@lines), 1, 'one LOG line of the extension at startup');
like($lines[0] // '', qr/max_worker_processes/, 'naming max_worker_processes') or diag($log);
is($node->safe_psql('postgres', 'CREATE EXTENSION ratelimit; SELECT rl_cleanup()'), '0',
	'rl_cleanup() works without the worker');

# enough slots: no such line
$node->append_conf('postgresql.conf', 'max_worker_processes = 8');
my $offset = -s $node->logfile;
$node->restart;
$node->poll_query_until('postgres', q{
	SELECT EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'ratelimit cleanup launcher')})
  or die 'the launcher did not start';
unlike(slurp_file($node->logfile, $offset), qr/ratelimit cleanup worker/, 'and none when a slot is free');

$node->stop;
done_testing();
