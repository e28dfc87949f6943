# A network that holds packets and loses the cancel request (a proxy in the
# test program): decisions stay within the deadline, return to the database
# within a backoff interval and a deadline once the network is back, and
# rl_client_free returns, while the lost cancel never completes.  Under
# AddressSanitizer and ThreadSanitizer (the cancel runs on a thread).
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_lost_cancel');
run_client(build_client('lost_cancel'), args => [ $node->host, $node->port ]);

# as in 107_client_threads: ThreadSanitizer needs a fixed address layout
my $arch = `uname -m`;
chomp $arch;
run_client(build_client('lost_cancel', sanitizer => 'thread'),
	args => [ $node->host, $node->port ], wrap => [ 'setarch', $arch, '-R' ]);

$node->stop;
done_testing();
