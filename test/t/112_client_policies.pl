# The C client by policy and over several limits: the server's answers from
# the database and in memory, one rl_take_all_detail call per multi-limit
# call and no peek (counted by track_functions), policy changes after the
# refresh interval, the last policies read during an outage, threads under
# ThreadSanitizer and AddressSanitizer.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = client_node('client_policies', "track_functions = 'all'");
my $nowhere = PostgreSQL::Test::Utils::tempdir_short();
my %steps = (stop => sub { $node->stop('fast') });
my @args = ($node->connstr('postgres'), "host=$nowhere port=1 dbname=postgres");

run_client(build_client('policies', sanitizer => 'address'),
	args => \@args, steps => \%steps);

# ThreadSanitizer maps fixed address ranges: run it without address space
# randomisation, which some kernels make too wide for it
$node->start;
$node->safe_psql('postgres', 'DROP EXTENSION ratelimit; CREATE EXTENSION ratelimit');
my $arch = `uname -m`;
chomp $arch;
run_client(build_client('policies', sanitizer => 'thread'),
	args => \@args, wrap => [ 'setarch', $arch, '-R' ], steps => \%steps);
done_testing();
