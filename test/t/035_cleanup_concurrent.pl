# Decisions racing with cleanup lose nothing.  Four clients take keys whose
# buckets keep expiring while the worker cleans every second: each takes a
# key twice in a row (the second must be denied: burst 1) and comes back to
# it after the bucket has expired, so the worker often deletes buckets at the
# moment a decision moves them into the future.  Each decision records the
# clock it was made at (rl_take_at), and the allowed decisions are then
# recomputed from those clocks with the GCRA formula: they must match exactly.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('concurrent');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.cleanup_interval = '1s'
ratelimit.cleanup_batch_size = 100
});
$node->start;

sub query { return $node->safe_psql('postgres', shift); }

query(q{
	CREATE EXTENSION ratelimit;
	CREATE TABLE decision (id bigserial PRIMARY KEY, client integer, k integer,
						   at timestamptz, allowed boolean);
});

# 20 per second: T = 50 ms, burst 1.  A decision's clock is 250 ms ahead of
# the server's, so a bucket the worker sees as expired (its tat before the
# run began) is expired for every later decision too, however the processes
# are scheduled.
my $rate = 20;
my $interval_us = 1_000_000 / $rate;
my $take = q{
INSERT INTO decision (client, k, at, allowed)
SELECT :client_id, :k, at, (rl_take_at('hammer', :client_id || '/' || :k, 20, 1, 1, at)).allowed
FROM (SELECT clock_timestamp() + interval '250 ms' AS at) AS s;
};
my $script = PostgreSQL::Test::Utils::tempdir() . '/take.sql';
PostgreSQL::Test::Utils::append_to_file($script, "\\set k random(1, 300)\n$take$take");

my $offset = -s $node->logfile;
my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '4', '-j', '2', '-T', '15', '-f', $script,
		'-h', $node->host, '-p', $node->port, 'postgres'
	],
	'>', \$out, '2>', \$err);
$pgbench->finish;
is($pgbench->result(0), 0, 'pgbench ran for 15 seconds') or diag($err);
like($out, qr/number of failed transactions: 0/, 'with no failed transaction');

my @runs = slurp_file($node->logfile, $offset)
  =~ /ratelimit cleanup deleted (\d+) expired buckets? in database "postgres"/g;
cmp_ok(scalar(@runs), '>=', 5, 'the worker deleted expired buckets in at least 5 runs meanwhile');
note('runs deleted ' . join(', ', @runs) . ' buckets');

# replay every key's decisions in order with the GCRA formula
my ($expected, $allowed, $mismatches, $total) = (0, 0, 0, 0);
my %tat;
for my $line (split /\n/, query(q{
	SELECT client, k, (extract(epoch FROM at) * 1000000)::bigint, allowed
	FROM decision ORDER BY client, k, id}))
{
	my ($client, $k, $now, $was) = split /\|/, $line;
	my $key = "$client/$k";
	my $t0 = defined $tat{$key} && $tat{$key} > $now ? $tat{$key} : $now;
	my $new_tat = $t0 + $interval_us;
	my $allow = $new_tat - $now <= $interval_us;    # tau = T * burst
	$tat{$key} = $new_tat if $allow;
	$total++;
	$expected++ if $allow;
	$allowed++ if $was eq 't';
	$mismatches++ if ($was eq 't') != $allow;
}
cmp_ok($total, '>', 1000, 'more than a thousand decisions were made');
note("$total decisions, $expected allowed by GCRA, $allowed allowed");
cmp_ok($expected, '<', $total, 'GCRA denied some of them (second takes)');
is($allowed, $expected, 'the allowed count is exactly what GCRA allows');
is($mismatches, 0, 'and every single decision matches');

$node->stop;
done_testing();
