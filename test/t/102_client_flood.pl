# A flood of 10 000 calls on one key far over its limit makes at most about
# twice the burst database writes and rl_take calls: the pre-check refuses
# the rest without a round trip.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_flood', "track_functions = 'all'");
my $bin = build_client('flood');

my ($writes, $calls);
run_client($bin, args => [ $node->connstr('postgres') ], steps => {
	count => sub {
		# a session flushes its statistics when it ends
		$node->poll_query_until('postgres', q{
			SELECT count(*) = 0 FROM pg_stat_activity
			WHERE application_name = 'ratelimit_client'})
		  or die "the client's sessions did not end\n";
		$writes = $node->safe_psql('postgres', q{
			SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables
			WHERE relname = 'rl_buckets'});
		$calls = $node->safe_psql('postgres', q{
			SELECT calls FROM pg_stat_user_functions WHERE funcname = 'rl_take'});
	} });

# burst 10: 10 allowed decisions write (1 insert, 9 updates); 20 calls at most
ok($writes <= 20, "at most twice the burst rows written to rl_buckets (got $writes)");
is($writes, 10, 'exactly the 10 allowed decisions wrote: denials write nothing');
ok($calls <= 20, "at most twice the burst rl_take calls (got $calls)");

$node->stop;
done_testing();
