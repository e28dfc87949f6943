# A DROP EXTENSION that runs while a call waits for a lock: the waiting call
# fails with a clear error in class 42 naming the table it waited for
# (rl_buckets, or rl_policies for a policy lookup), never with an
# internal error about a relation OID, in both stores, whichever function it
# is (rl_take in the explicit and the policy form, rl_take_all, rl_refund,
# rl_reset) and whether its session has called it before or not.  One
# session holds a lock in an open transaction, DROP EXTENSION waits for it,
# and the call in a third session queues behind the DROP; the holder
# commits, the DROP goes through, and the queued call finds the table gone.
# The holder locks rl_buckets (a bucket's row lock with the table store), or
# changes a policy: then the DROP holds rl_buckets and waits for
# rl_policies, which a session that has not read a policy yet reads first.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# each call, with KEY for its key: the warm-up calls it on another key
my @calls = (
	[ 'rl_take', q{SELECT rl_take('drop', 'KEY', 1, 1)} ],
	[ 'rl_take with a policy', q{SELECT rl_take('policy', 'KEY')} ],
	[ 'rl_take_all', q{SELECT rl_take_all(ARRAY['drop', 'drop2'], ARRAY['KEY', 'KEY'], ARRAY[1, 1], ARRAY[1, 1])} ],
	[ 'rl_refund', q{SELECT rl_refund('drop', 'KEY')} ],
	[ 'rl_reset', q{SELECT rl_reset('drop', 'KEY')} ]);
my $policies = q{BEGIN; UPDATE rl_policies SET burst = 2};

for my $store (qw(table memory))
{
	my $node = PostgreSQL::Test::Cluster->new("drop_$store");
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = $store
ratelimit.in_transaction = allow
ratelimit.cleanup_interval = 0
});
	$node->start;

	# wait until the session whose query starts with prefix waits for a lock
	my $wait_for_lock = sub {
		my ($prefix) = @_;
		$prefix =~ s/'/''/g;
		$node->poll_query_until('postgres', qq{
			SELECT EXISTS (SELECT FROM pg_stat_activity
						   WHERE query LIKE '$prefix%' AND wait_event_type = 'Lock')})
		  or die "no session running $prefix waits for a lock";
	};

	# a memory decision takes no row lock: that holder locks the table itself
	my @holds = (
		$store eq 'table'
		? q{BEGIN; SELECT rl_take('drop', 'held', 1, 1)}
		: q{BEGIN; SELECT count(*) FROM rl_buckets},
		$policies);

	for my $case (map { my $h = $_; map { [ $h, @$_, 1 ], [ $h, @$_, 0 ] } @calls } @holds)
	{
		my ($hold, $function, $template, $warm) = @$case;
		my $name = "$store store, holder \"$hold\": $function in a "
		  . ($warm ? 'session that has called it before' : 'new session');
		(my $sql = $template) =~ s/KEY/other/g;
		(my $warm_up = $template) =~ s/KEY/warm-up/g;

		$node->safe_psql('postgres', q{
			CREATE EXTENSION IF NOT EXISTS ratelimit;
			INSERT INTO rl_policies VALUES ('policy', 1, 1) ON CONFLICT DO NOTHING});
		my $holder = $node->background_psql('postgres');
		my $dropper = $node->background_psql('postgres');
		my $taker = $node->background_psql('postgres', on_error_stop => 0);
		$taker->query_safe('\set VERBOSITY verbose');
		$taker->query_safe("$warm_up; SELECT rl_reset('drop', 'warm-up'), rl_reset('policy', 'warm-up')")
		  if $warm;

		$holder->query_safe($hold);
		$dropper->query_until(qr/dropping/, "\\echo dropping\nDROP EXTENSION ratelimit;\n");
		$wait_for_lock->('DROP EXTENSION');
		$taker->query_until(qr/taking/, "\\echo taking\n$sql;\n");
		$wait_for_lock->($sql);
		$holder->query_safe('COMMIT');

		$taker->query('SELECT 1');
		my $err = $taker->{stderr};
		like($err, qr/ERROR:  42P01: /, "$name: the queued call fails in class 42");
		like($err, qr/rl_(buckets|policies)/, "$name: naming the table") or diag($err);
		unlike($err, qr/could not open relation with OID/, "$name: not with an internal error");
		$dropper->query_safe('SELECT 1');
		is($node->safe_psql('postgres',
			q{SELECT count(*) FROM pg_extension WHERE extname = 'ratelimit'}), '0',
			"$name: the extension is dropped");
		$_->quit for ($holder, $dropper, $taker);
	}
	$node->stop;
}

done_testing();
