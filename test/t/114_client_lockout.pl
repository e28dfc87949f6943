# The C client and lockouts: a lock the database started is kept by the
# pre-check and, during an outage, by the fallback; the fallback starts its
# own; a database at extension 1.2 is read without the lockout columns.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = client_node('client_lockout');
$node->safe_psql('postgres', q{
	INSERT INTO rl_policies (limiter, rate, burst, lockout)
	VALUES ('signin', 1.0 / 3600, 2, interval '600 seconds')});
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', q{
	CREATE EXTENSION ratelimit VERSION '1.2';
	INSERT INTO rl_policies (limiter, rate, burst) VALUES ('signin', 1, 5)});

run_client(build_client('lockout'),
	args => [ $node->connstr('postgres'), $node->connstr('old') ],
	steps => { stop => sub { $node->stop('fast') } });
done_testing();
