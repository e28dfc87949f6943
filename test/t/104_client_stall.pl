# The server stalls on a row lock: the client returns within its deadline,
# cancels the query (no backend waits), falls back for the reason timeout,
# probes once per backoff interval, and returns to the database afterwards.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_stall');
my $bin = build_client('stall');
run_client($bin, args => [ $node->connstr('postgres'), $node->connstr('postgres') ]);
ok($node->log_contains(qr/canceling statement due to user request/),
	'the server log shows the cancelled statements');

$node->stop;
done_testing();
