# Decisions on a key are ordered by their clocks, so remaining counts down
# once each: 30 connections on one key (burst 7, rate 0.001) are allowed
# exactly 7 times and report remaining 6, 5, ..., 0, each once.  In both
# stores, by rl_take and by rl_take_all, five rounds each, with the 30
# released at one instant, and with the 30 queued behind another
# transaction's lock on the key's (passed) row in rl_buckets.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rounds = 5;

for my $case (
	[ 'table', '' ],
	[ 'memory', "shared_preload_libraries = 'ratelimit'\nratelimit.store = memory" ])
{
	my ($store, $conf) = @$case;
	my $node = PostgreSQL::Test::Cluster->new("remaining_$store");
	$node->init;
	$node->append_conf('postgresql.conf', "max_connections = 60\n$conf");
	$node->start;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		CREATE TABLE outcome (test text, round integer, allowed boolean, remaining integer);
	});

	for my $call (
		[ 'rl_take', q{rl_take('order', :key, 0.001, 7)} ],
		[ 'rl_take_all', q{rl_take_all(ARRAY['order'], ARRAY[:key], ARRAY[0.001], ARRAY[7])} ])
	{
		my ($name, $sql) = @$call;
		for my $barrier ('at one instant', 'behind a row lock')
		{
			my $test = "$store, $name, $barrier";
			for my $round (1 .. $rounds)
			{
				my $key = "$name $barrier $round";
				my $stored = qq{sha256(convert_to('order', 'UTF8') || '\\x00'::bytea || convert_to('$key', 'UTF8'))};
				my $holder = $node->background_psql('postgres');
				my $script = PostgreSQL::Test::Utils::tempdir() . '/decide.sql';
				my $waiting;
				if ($barrier eq 'at one instant')
				{
					# every connection waits for the holder's lock, then decides
					$holder->query_safe('SELECT pg_advisory_lock(20)');
					PostgreSQL::Test::Utils::append_to_file($script, 'SELECT pg_advisory_lock_shared(20);');
					$waiting = q{SELECT count(*) = 30 FROM pg_locks
						WHERE locktype = 'advisory' AND objid = 20 AND NOT granted};
				}
				else
				{
					# a passed bucket (the same as none), locked by the holder
					$node->safe_psql('postgres', qq{INSERT INTO rl_buckets
						VALUES ($stored, now() - interval '1 hour', 1000000000)});
					$holder->query_safe(qq{BEGIN; SELECT FROM rl_buckets WHERE key = $stored FOR UPDATE});
					$waiting = q{SELECT count(*) = 30 FROM pg_stat_activity
						WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO outcome%'};
				}
				PostgreSQL::Test::Utils::append_to_file($script, qq{
INSERT INTO outcome SELECT '$test', :round, d.allowed, d.remaining FROM $sql d;
});
				my @runs;
				for (1 .. 3)
				{
					my ($out, $err) = ('', '');
					push @runs, [ IPC::Run::start(
						[ 'pgbench', '-n', '-c', 10, '-j', 1, '-t', 1, '-D', "round=$round",
						  '-D', "key='$key'", '-f', $script, '-h', $node->host, '-p', $node->port,
						  'postgres' ],
						'>', \$out, '2>', \$err), \$err ];
				}
				$node->poll_query_until('postgres', $waiting)
				  or die "$test: the 30 connections do not wait";
				$holder->query_safe($barrier eq 'at one instant'
					? 'SELECT pg_advisory_unlock(20)' : 'COMMIT');
				for my $run (@runs)
				{
					$run->[0]->finish;
					is($run->[0]->result(0), 0, "$test, round $round: 10 connections decided")
					  or diag(${ $run->[1] });
				}
				$holder->quit;
			}
			is($node->safe_psql('postgres', qq{
				SELECT string_agg(r, ' ' ORDER BY round) FROM (
					SELECT round, count(*) FILTER (WHERE allowed) || ':' ||
						   string_agg(remaining::text, ',' ORDER BY remaining DESC) FILTER (WHERE allowed) AS r
					FROM outcome WHERE test = '$test' GROUP BY round) s}),
				join(' ', ('7:6,5,4,3,2,1,0') x $rounds),
				"$test: each round allowed 7, reporting remaining 6 to 0 once each");
		}
	}
	$node->stop;
}

done_testing();
