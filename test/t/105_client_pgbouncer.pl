# The C client through a real PgBouncer in transaction pooling mode: four
# client connections over two server connections decide exactly (a named
# prepared statement would be missing on one of them), and a
# stalled query is cancelled through PgBouncer within the deadline.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_pgbouncer');
my $port = start_pgbouncer($node, 'transaction', 2);
my $through = "host=127.0.0.1 port=$port dbname=postgres sslmode=disable gssencmode=disable";

is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server runs');
my $count_backends = sub {
	my $backends = $node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()});
	ok($backends >= 1 && $backends <= 2,
		"PgBouncer's two server connections served the client's four (got $backends)");
};
run_client(build_client('pgbouncer'), args => [$through],
	steps => { count_backends => $count_backends });

# the stall, with the client behind PgBouncer and the lock holder direct
run_client(build_client('stall'), args => [ $through, $node->connstr('postgres') ]);
ok($node->log_contains(qr/canceling statement due to user request/),
	'PgBouncer forwarded the cancel requests to the server');

$node->stop;
done_testing();
