# The client's key bound: with the database up, a new key at the bound is
# decided by the database and then takes the place of the least recently
# used one; while the server is down, only buckets that are full again make
# room, a key without room is refused, and nothing is allowed for want of
# room, however many keys are hammered; back up, the database decides again.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_eviction');
run_client(build_client('eviction'), args => [ $node->connstr('postgres') ],
	steps => {
		stop => sub { $node->stop('fast') },
		start => sub { $node->start },
	});
$node->stop;
done_testing();
