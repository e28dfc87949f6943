# 8 threads x 10 000 calls on one client, with the database up and then
# down, under ThreadSanitizer (clang) and under AddressSanitizer with leak
# detection: no report, and exact decisions per key.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_threads');
my %steps = (stop => sub { $node->stop('fast') });

# ThreadSanitizer maps fixed address ranges: run it without address space
# randomisation, which some kernels make too wide for it
my $arch = `uname -m`;
chomp $arch;
run_client(build_client('threads', sanitizer => 'thread'),
	args => [ $node->connstr('postgres'), 'tsan' ],
	wrap => [ 'setarch', $arch, '-R' ], steps => \%steps);

$node->start;
run_client(build_client('threads', sanitizer => 'address'),
	args => [ $node->connstr('postgres'), 'asan' ], steps => \%steps);
done_testing();
