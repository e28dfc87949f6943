# More limiters fall back than the client remembers: at most one warning per
# limiter per interval, and one summary line per interval for the others.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

# never started: every connection fails at once
my $node = PostgreSQL::Test::Cluster->new('client_warnings');
my $bin = build_client('warnings');
run_client($bin, args => [ $node->connstr('postgres') ]);

done_testing();
