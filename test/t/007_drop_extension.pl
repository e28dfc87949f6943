# A DROP EXTENSION that runs while rl_take waits for the table: the waiting
# call fails with a clear error in class 42, never with an internal error
# about a relation OID.  One session holds a bucket's row lock in an open
# transaction, DROP EXTENSION waits for it, and a decision in a third session
# queues behind the DROP; the holder commits, the DROP goes through, and the
# queued decision finds the table gone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('drop');
$node->init;
$node->append_conf('postgresql.conf', 'ratelimit.in_transaction = allow');
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

# wait until the session whose query starts with prefix waits for a lock
sub wait_for_lock
{
	my ($prefix) = @_;
	$prefix =~ s/'/''/g;
	$node->poll_query_until('postgres', qq{
		SELECT EXISTS (SELECT FROM pg_stat_activity
					   WHERE query LIKE '$prefix%' AND wait_event_type = 'Lock')})
	  or die "no session running $prefix waits for a lock";
}

for my $case (
	[ 'a session that has decided before', 1, q{SELECT rl_take('drop', 'other', 1, 1)} ],
	[ 'a new session', 0, q{SELECT rl_take('drop', 'other', 1, 1)} ],
	[ 'rl_reset in a session that has reset before', 1, q{SELECT rl_reset('drop', 'other')} ])
{
	my ($name, $warm, $call) = @$case;
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS ratelimit');
	my $holder = $node->background_psql('postgres');
	my $dropper = $node->background_psql('postgres');
	my $taker = $node->background_psql('postgres', on_error_stop => 0);
	$taker->query_safe('\set VERBOSITY verbose');
	$taker->query_safe(q{SELECT rl_take('drop', 'warm-up', 1, 1), rl_reset('drop', 'warm-up')})
	  if $warm;

	$holder->query_safe(q{BEGIN; SELECT rl_take('drop', 'held', 1, 1)});
	$dropper->query_until(qr/dropping/, "\\echo dropping\nDROP EXTENSION ratelimit;\n");
	wait_for_lock('DROP EXTENSION');
	$taker->query_until(qr/taking/, "\\echo taking\n$call;\n");
	wait_for_lock($call);
	$holder->query_safe('COMMIT');

	$taker->query('SELECT 1');
	my $err = $taker->{stderr};
	like($err, qr/ERROR:  42P01: /, "$name: the queued call fails in class 42");
	like($err, qr/rl_buckets/, "$name: naming the table") or diag($err);
	unlike($err, qr/could not open relation with OID/, "$name: not with an internal error");
	$dropper->query_safe('SELECT 1');
	is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_extension WHERE extname = 'ratelimit'}), '0',
		"$name: the extension is dropped");
	$_->quit for ($holder, $dropper, $taker);
}

$node->stop;
done_testing();
