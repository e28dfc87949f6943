# Invalidations during a call (function DDL, VACUUM and ANALYZE of rl_buckets) never change the store it works on, in both stores: rl_cleanup() and the worker free no live bucket, first decisions, rl_refund and rl_take_all never fail.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = 8;

# start pgbench running SCRIPT for $seconds in CLIENTS connections
sub start_pgbench
{
	my ($node, $name, $script, $clients) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir() . "/$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $script);
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-c', $clients, '-j', '1', '-T', $seconds,
			'-f', $file, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return [ $name, $h, \$out, \$err ];
}

# finish_pgbench(RUN, AT_LEAST): RUN ended well, after AT_LEAST transactions.
# The floors are far below what a loaded machine runs in $seconds (a VACUUM
# and ANALYZE of a growing table take tens of milliseconds there): they only
# show that each loop kept running next to the others.
sub finish_pgbench
{
	my ($run, $at_least) = @_;
	my ($name, $h, $out, $err) = @$run;
	$h->finish;
	is($h->result(0), 0, "$name: pgbench finished") or diag($$err);
	like($$out, qr/number of failed transactions: 0/, "$name: no call failed")
	  or diag($$out . $$err);
	my ($count) = $$out =~ /number of transactions actually processed: (\d+)/;
	cmp_ok($count // 0, '>=', $at_least, "$name: it ran $at_least times or more");
	note("$name: " . ($count // 0) . " transactions");
}

for my $store (qw(table memory))
{
	my $node = PostgreSQL::Test::Cluster->new("resolved_$store");
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = $store
ratelimit.memory_buckets = 400000
ratelimit.cleanup_interval = 1s
ratelimit.in_transaction = allow
max_connections = 40
});
	$node->start;
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		-- rl_cleanup() may free only passed buckets: here none ever passes
		CREATE FUNCTION cleanup_frees_nothing() RETURNS void LANGUAGE plpgsql AS $$
		DECLARE
			freed bigint := rl_cleanup();
		BEGIN
			IF freed <> 0 THEN
				RAISE EXCEPTION 'rl_cleanup() freed % live buckets', freed;
			END IF;
		END $$;
		-- 1000 spent keys, and 1000 keys with a debt of 1000 cells to refund
		SELECT rl_take('spent', k::text, 0.001, 1) FROM generate_series(1, 1000) k;
		SELECT rl_take('refund', k::text, 0.001, 1000, 1000) FROM generate_series(1, 1000) k;
	});

	# No call below is ever denied, so no bucket ever passes: a table-store
	# rl_take_all that a concurrent call denies once it holds its rows leaves
	# the passed rows it inserted to lock absent keys (the same as none),
	# which cleanup rightly deletes; all_c's burst is never spent.
	my $started = $node->safe_psql('postgres', 'SELECT now()');
	my @runs = (
		[ start_pgbench($node, "$store: function DDL loop", q{
CREATE OR REPLACE FUNCTION public.noise() RETURNS integer LANGUAGE sql AS 'SELECT 1';
}, 1), 20 ],
		[ start_pgbench($node, "$store: VACUUM and ANALYZE loop", q{
VACUUM rl_buckets;
ANALYZE rl_buckets;
}, 1), 10 ],
		[ start_pgbench($node, "$store: rl_cleanup", q{
SELECT cleanup_frees_nothing();
}, 2), 20 ],
		[ start_pgbench($node, "$store: new keys, refunds, rl_take_all", q{
\set k random(1, 1000000000)
\set r random(1, 1000)
SELECT rl_take('new', :k::text, 0.001, 5);
SELECT rl_refund('refund', :r::text, 1);
SELECT rl_take_all(ARRAY['all_a', 'all_b', 'all_c'], ARRAY[:k::text, :k::text, :r::text],
	ARRAY[0.001, 0.001, 0.001], ARRAY[5, 5, 100000]);
}, 4), 100 ]);
	finish_pgbench(@$_) for @runs;

	is($node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE (rl_take('spent', k::text, 0.001, 1)).allowed)
		FROM generate_series(1, 1000) k}),
		'0', "$store: the 1000 spent keys are still spent");
	ok(!$node->log_contains(qr/ratelimit cleanup deleted/, $offset),
		"$store: the worker deleted nothing (nothing had passed)");
	is($node->safe_psql('postgres', qq{SELECT count(*) FROM rl_cleanup_runs()
			WHERE database = 'postgres' AND started > '$started'}),
		'1', "$store: the worker ran meanwhile");
	$node->stop;
}

done_testing();
