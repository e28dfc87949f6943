# rl_take decides on the newest committed state whatever the isolation level
# of the caller's transaction: a REPEATABLE READ transaction whose snapshot is
# older than another session's decisions still counts them, and does not fail.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('isolation');
$node->init;
$node->append_conf('postgresql.conf', 'ratelimit.in_transaction = allow');
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

my $take = q{SELECT allowed FROM rl_take('login', 'ada', 1.0 / 3600, 2)};

for my $level ('REPEATABLE READ', 'SERIALIZABLE')
{
	$node->safe_psql('postgres', q{SELECT rl_reset('login', 'ada')});
	my $old = $node->background_psql('postgres');
	$old->query_safe("BEGIN ISOLATION LEVEL $level; SELECT count(*) FROM pg_class");

	is($node->safe_psql('postgres', $take), 't', "$level: another session spends one");
	is($node->safe_psql('postgres', $take), 't', "$level: and the second");
	my ($out, $ret) = $old->query($take);
	is($ret, 0, "$level: the older transaction decides without a serialization error");
	is($out, 'f', "$level: and sees the budget spent after its snapshot was taken");
	$old->query_safe('COMMIT');
	$old->quit;
}

$node->stop;
done_testing();
