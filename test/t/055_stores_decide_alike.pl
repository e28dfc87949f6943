# Both stores decide identically: one sequence of rl_take_at calls (limits
# that change, costs above and below the burst, peeks, resets) replayed on a
# table-store cluster, on a memory-store cluster, and on a memory-store
# cluster whose 16 slots hold fewer buckets than the sequence has (so that
# some keys are decided in rl_buckets); every answer must be the same.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my %conf = (
	table => '',
	memory => qq{shared_preload_libraries = 'ratelimit'\nratelimit.store = memory\n},
	memory_full => qq{shared_preload_libraries = 'ratelimit'\nratelimit.store = memory
ratelimit.memory_buckets = 16\n},
);

# the sequence, the same on every run
srand(20261201);
my @rates = (0.1, 0.5, 1, 3, 10, 250);
my @bursts = (1, 2, 3, 5, 20);
my %limit;
my $at_us = 0;
my @calls;
for my $i (1 .. 3000)
{
	my $limiter = ('login', 'search', 'upload')[ int(rand(3)) ];
	my $key = 'k' . int(rand(10));
	# a limiter's limit changes now and then
	$limit{$limiter} = [ $rates[ int(rand(@rates)) ], $bursts[ int(rand(@bursts)) ] ]
	  if !$limit{$limiter} || rand() < 0.03;
	my ($rate, $burst) = @{ $limit{$limiter} };
	my $r = rand();
	my $cost = $r < 0.1 ? 0 : $r < 0.15 ? $burst + 1 : $r < 0.3 ? 1 + int(rand($burst)) : 1;
	# mostly small steps, sometimes none, sometimes long enough for buckets to pass
	my $step = rand();
	$at_us += $step < 0.2 ? 0 : $step < 0.9 ? int(rand(300_000)) : int(rand(30_000_000));
	my $at = sprintf("timestamptz '2030-01-01 00:00:00+00' + interval '%d microseconds'", $at_us);
	if (rand() < 0.02)
	{
		push @calls, "SELECT $i, rl_reset('$limiter', '$key');";
		next;
	}
	push @calls, "SELECT $i, (rl_take_at('$limiter', '$key', $rate, $burst, $cost, $at)).*;";
}
my $script = join("\n", @calls);

# Calls at times that do not follow each other: 16 keys spent at T, a new
# key decided a day later, then the 16 keys again at T + 10 s.  rl_take_at's
# clock is the caller's; a bucket live at T + 10 s stays spent.
my $t = q{timestamptz '2040-01-01 00:00:00+00'};
my $clocks = join("\n",
	(map { "SELECT 'spend $_', allowed FROM rl_take_at('fill', '$_', 0.001, 1, 1, $t);" } 1 .. 16),
	"SELECT 'a day later', allowed FROM rl_take_at('late', 'k', 0.001, 1, 1, $t + interval '1 day');",
	(map { "SELECT 'again $_', allowed FROM rl_take_at('fill', '$_', 0.001, 1, 1, $t + interval '10 s');" } 1 .. 16));

my %answers;
for my $store (sort keys %conf)
{
	my $node = PostgreSQL::Test::Cluster->new("alike_$store");
	$node->init;
	$node->append_conf('postgresql.conf', "ratelimit.cleanup_interval = 0\n$conf{$store}");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
	$answers{$store} = [ split /\n/, $node->safe_psql('postgres', $script) ];
	$answers{"$store clocks"} = $node->safe_psql('postgres', $clocks);
	$answers{"$store status"} = $node->safe_psql('postgres',
		'SELECT store, coalesce(memory_used, 0) + table_buckets > 0, table_buckets > 0 FROM rl_store_status()');
	$node->stop;
}

is(scalar(@{ $answers{table} }), 3000, 'the table store answered every call');
my @allowed = grep { /^\d+\|t\|/ } @{ $answers{table} };
my @denied = grep { /^\d+\|f\|/ } @{ $answers{table} };
cmp_ok(scalar(@allowed), '>', 500, 'many calls were allowed');
cmp_ok(scalar(@denied), '>', 200, 'many calls were denied');
is($answers{'memory status'}, 'memory|t|f', 'the memory store decided everything in memory');
is($answers{'memory_full status'}, 'memory|t|t', 'the small memory store also decided in rl_buckets');

# rl_reset answers true when it removed a bucket, even one already full
# again; such a bucket may have been forgotten first (a row by cleanup, a
# slot by a new key that needed it), so only there may the full memory
# store answer false where the table answers true
sub same
{
	my ($store, $i) = @_;
	my ($table, $other) = ($answers{table}[$i], $answers{$store}[$i] // '');
	return $table eq $other
	  || ($store eq 'memory_full' && $calls[$i] =~ /rl_reset/
		&& $table =~ /\|t$/ && $other eq ($table =~ s/t$/f/r));
}

for my $store (qw(memory memory_full))
{
	my @differ = grep { !same($store, $_) } 0 .. 2999;
	is(scalar(@differ), 0, "$store: every one of the 3000 answers is the table store's")
	  or diag(join "\n", map { "$calls[$_]\n  table: $answers{table}[$_]\n  $store: "
		  . ($answers{$store}[$_] // 'none') } @differ[ 0 .. ($#differ < 4 ? $#differ : 4) ]);
}

like($answers{'table clocks'}, qr/again 1\|f\n(again \d+\|f\n){14}again 16\|f$/,
	'table store: the 16 buckets are still spent at T + 10 s');
for my $store (qw(memory memory_full))
{
	is($answers{"$store clocks"}, $answers{'table clocks'},
		"$store: a call a day ahead forgets no bucket that is live at T + 10 s");
}

done_testing();
