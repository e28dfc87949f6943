# The C client in front of a ratelimit_proxy with two shards, one of which
# stops and comes back: with the option partitions, only the stopped shard's
# keys fall back to memory (test/client/partitions.c), by policy too: the
# proxy serves rl_policies.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Digest::SHA qw(sha256);
use PostgreSQL::Test::Cluster;
use Test::More;

my @shards = map { client_node("partitions_shard$_") } 0, 1;
$_->safe_psql('postgres', q{INSERT INTO rl_policies VALUES ('sign_in_p', 1.0 / 3600, 100)})
  for @shards;
my $proxy = PostgreSQL::Test::Cluster->new('partitions_proxy');
$proxy->init;
$proxy->start;
$proxy->safe_psql('postgres', sprintf(q{
	CREATE EXTENSION ratelimit_proxy CASCADE;
	CREATE SERVER ratelimit FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '%s', p1 '%s');
	CREATE USER MAPPING FOR PUBLIC SERVER ratelimit;
}, map { sprintf('host=%s port=%d dbname=postgres', $_->host, $_->port) } @shards));

# keys of limiters sign_in and sign_in_p by the partition rl_shard_hash names
my (%on, %policy_on);
for my $i (1 .. 100)
{
	my $key = "user$i";
	my $part = (unpack('N', substr(sha256("sign_in\0$key"), 0, 4)) & 0x7fffffff) % 2;
	push @{ $on{$part} }, $key;
	$part = (unpack('N', substr(sha256("sign_in_p\0$key"), 0, 4)) & 0x7fffffff) % 2;
	push @{ $policy_on{$part} }, $key;
}
is($proxy->safe_psql('postgres', "SELECT rl_shard_hash('sign_in', '$on{1}[0]') % 2"), '1',
	'the key chosen for shard 1 is routed there by the proxy');

my $long = 'k' x 150;
my $long_hash = $proxy->safe_psql('postgres', "SELECT rl_shard_hash('sign_in', '$long')");

my $bin = build_client('partitions');
run_client($bin, args => [ $proxy->connstr('postgres'), 2, $on{0}[0], $on{0}[1], $on{1}[0],
		$long, $long_hash, $policy_on{0}[0], $policy_on{1}[0] ],
	steps => {
		stop => sub { $shards[1]->stop('fast') },
		start => sub { $shards[1]->start },
	});

$proxy->stop;
$_->stop for @shards;
done_testing();
