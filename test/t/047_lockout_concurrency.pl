# A lockout starts once: 30 connections hammering one key of a policy with
# a lockout (burst 5, rate 0.001, lockout 1 hour) are allowed exactly 5
# times, one lockout is started (rl_stats lockouts = 1), and every other
# call is denied until the lock_until of that one lockout.  In both stores.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use Hammer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($processes, $clients, $transactions) = (3, 10, 4);
my $calls = $processes * $clients * $transactions;

for my $store ('table', 'memory')
{
	# rl_stats counts in shared memory: preloaded for both stores
	my $node = PostgreSQL::Test::Cluster->new("lockout_$store");
	$node->init;
	$node->append_conf('postgresql.conf', "max_connections = 60\n"
		  . "shared_preload_libraries = 'ratelimit'\nratelimit.store = $store");
	$node->start;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('hammered', 0.001, 5, '1 hour');
		CREATE TABLE outcome (allowed boolean, retry_after double precision,
							  before timestamptz, after timestamptz);
		-- the clock just before and just after the decision, whatever the load
		CREATE FUNCTION timed_take() RETURNS SETOF outcome LANGUAGE plpgsql AS $$
		DECLARE
			before timestamptz := clock_timestamp();
			d rl_decision := rl_take('hammered', 'k');
		BEGIN
			RETURN NEXT (d.allowed, d.retry_after, before, clock_timestamp())::outcome;
		END $$;
	});

	hammer($node, q{
INSERT INTO outcome SELECT * FROM timed_take();
}, $processes, $transactions, $clients);

	is($node->safe_psql('postgres', 'SELECT count(*) FROM outcome'), $calls, "$store: every call answered");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM outcome WHERE allowed'), 5,
		"$store: exactly the burst allowed");
	is($node->safe_psql('postgres', q{SELECT (allowed, denied, lockouts)::text FROM rl_stats
		WHERE limiter = 'hammered'}), '(5,' . ($calls - 5) . ',1)',
		"$store: rl_stats: 5 allowed, the rest denied, one lockout started");
	is($node->safe_psql('postgres', q{SELECT (store, lock_us)::text FROM rl_inspect('hammered', 'k')}),
		"($store,3600000000)", "$store: the key is locked for the lockout's length");
	# a denial waits until the one lock_until: its decision's clock,
	# lock_until - retry_after, lies between the clock read just before and
	# just after it (1 us for the seconds' rounding)
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM outcome o, rl_inspect('hammered', 'k') i
		WHERE NOT o.allowed AND o.retry_after IS NOT NULL
		  AND i.lock_until - o.retry_after * interval '1 second'
			  BETWEEN o.before - interval '1 microsecond' AND o.after + interval '1 microsecond'}),
		$calls - 5, "$store: every denial waits for the same lock_until");
	$node->stop;
}

done_testing();
