# A policy committed while a session reads rl_policies, or while it is in an
# open transaction, applies at that session's next call, in both stores.
#
# The read: a session reading a limiter's policy for the first time opens
# rl_policies, then waits for its primary key's index, which another session
# holds (REINDEX INDEX in the transaction that inserts the policy).  That
# transaction commits; the waiting read wakes and processes the commit's
# invalidation.  It must not cache "no policy" from a snapshot taken before
# the commit: that would be kept until some unrelated invalidation, with the
# explicit form accepted and the policy form unknown in every later call.
#
# The open transaction: a cache hit takes no lock, so nothing processed the
# invalidation of a commit made after the transaction's first call.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# the output and the errors of sql in session s
sub run_in
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

for my $store ('table', 'memory')
{
	my $node = PostgreSQL::Test::Cluster->new("policy_cache_$store");
	$node->init;
	$node->append_conf('postgresql.conf', 'ratelimit.in_transaction = allow');
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
}) if $store eq 'memory';
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
	is($node->safe_psql('postgres', 'SELECT store FROM rl_store_status()'), $store,
		"$store store");
	my $pkey = $node->safe_psql('postgres', q{
		SELECT indexrelid::regclass FROM pg_index
		WHERE indrelid = 'rl_policies'::regclass AND indisprimary});

	# the read that waits for the index while the policy commits
	my $holder = $node->background_psql('postgres');
	my $reader = $node->background_psql('postgres', on_error_stop => 0);
	$reader->query_safe('\set VERBOSITY verbose');
	$reader->query_safe(q{SELECT rl_take('warm', 'k', 1, 1)});
	$holder->query_safe(qq{BEGIN; INSERT INTO rl_policies VALUES ('lim', 1, 5); REINDEX INDEX $pkey});
	$reader->{stderr} = '';
	$reader->query_until(qr/taking/, "\\echo taking\nSELECT rl_take('lim', 'k', 1, 1);\n");
	$node->poll_query_until('postgres', qq{
		SELECT EXISTS (SELECT FROM pg_locks
					   WHERE relation = '$pkey'::regclass AND NOT granted)})
	  or die "the read of rl_policies does not wait for its index";
	$holder->query_safe('COMMIT');
	my ($out, $err) = run_in($reader, 'SELECT 1');
	like($err, qr/ERROR:  42501: limiter "lim" has a policy/,
		"$store: the read that waited for the commit sees the policy");
	($out, $err) = run_in($reader, q{SELECT rl_take('lim', 'k', 1, 1)});
	like($err, qr/ERROR:  42501: limiter "lim" has a policy/,
		"$store: the next call's explicit form is refused");
	($out, $err) = run_in($reader, q{SELECT remaining FROM rl_take('lim', 'k', 1)});
	is("$out|$err", '4|', "$store: the next call's policy form decides by the policy");
	$_->quit for ($holder, $reader);

	# a transaction open before the policy existed
	my $app = $node->background_psql('postgres', on_error_stop => 0);
	$app->query_safe('\set VERBOSITY verbose');
	$app->query_safe(q{BEGIN; SELECT rl_take('x', 'k', 1, 5)});
	$node->safe_psql('postgres', q{INSERT INTO rl_policies VALUES ('x', 1, 5)});
	($out, $err) = run_in($app, q{SELECT rl_take('x', 'k', 1, 5)});
	like($err, qr/ERROR:  42501: limiter "x" has a policy/,
		"$store: a policy committed during a transaction closes its explicit form");
	$app->query_safe('ROLLBACK');

	# a policy changed during a transaction: its next call's new key shows
	# the burst in remaining and 1 / rate in reset_after
	$node->safe_psql('postgres', q{INSERT INTO rl_policies VALUES ('y', 1, 5)});
	$app->query_safe('BEGIN');
	is($app->query_safe(q{SELECT remaining, reset_after FROM rl_take('y', 'k1', 1)}), '4|1',
		"$store: in a transaction, by the policy");
	$node->safe_psql('postgres', q{UPDATE rl_policies SET rate = 0.5, burst = 2 WHERE limiter = 'y'});
	is($app->query_safe(q{SELECT remaining, reset_after FROM rl_take('y', 'k2', 1)}), '1|2',
		"$store: a policy changed during a transaction applies at its next call");
	$app->query_safe('COMMIT');
	$app->quit;
	$node->stop;
}

done_testing();
