# The client's key bound: with the database up the decisions stay exact;
# during an outage full buckets go first, then the least recently used, and
# no decision is allowed for want of room.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_eviction');
run_client(build_client('eviction'), args => [ $node->connstr('postgres') ],
	steps => { stop => sub { $node->stop('fast') } });
done_testing();
