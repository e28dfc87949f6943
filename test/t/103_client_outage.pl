# The server stops while the client runs, then comes back: fallback within
# the deadline, the limit kept in memory, one warning per limiter, counters
# by reason, and decisions back in the database after the backoff.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_outage');
my $bin = build_client('outage');
run_client($bin, args => [ $node->connstr('postgres') ], steps => {
	stop => sub { $node->stop('fast') },
	start => sub { $node->start },
});

$node->stop;
done_testing();
