# The C client decides as the server does: a sequence through the database,
# the pre-check and the in-memory fallback, bad use refused with the server's
# messages, and rl_take found in a schema given as an option.
use strict;
use warnings;
use FindBin;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = client_node('client_decisions');
$node->safe_psql('postgres', q{
	CREATE DATABASE schema_db;
});
$node->safe_psql('schema_db', q{
	CREATE SCHEMA "rl ""q""";
	CREATE EXTENSION ratelimit SCHEMA "rl ""q""";
});

my $bin = build_client('decisions');
my $nowhere = PostgreSQL::Test::Utils::tempdir_short();
run_client($bin, args => [
	$node->connstr('postgres'),
	"host=$nowhere port=1 dbname=postgres",
	$node->connstr('schema_db') ]);

$node->stop;
done_testing();
