# Choosing the memory store: without preloading every call fails with a hint
# and nothing is decided in the table; switching from the table store keeps
# the budgets already in rl_buckets; a hot standby of a memory-store primary
# refuses every decision as the table store does.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# 1. ratelimit.store = memory without shared_preload_libraries
my $bare = PostgreSQL::Test::Cluster->new('memory_not_preloaded');
$bare->init;
$bare->append_conf('postgresql.conf', 'ratelimit.store = memory');
$bare->start;
$bare->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
for my $call (
	q{SELECT rl_reset('login', 'nobody')},
	q{SELECT rl_take('login', 'ada', 1, 1)},
	q{SELECT rl_take_at('login', 'bob', 1, 1, 1, now())},
	q{SELECT rl_cleanup()},
	q{SELECT rl_store_status()})
{
	my ($name) = $call =~ /SELECT (\w+)/;
	my ($ret, $out, $err) = $bare->psql('postgres', "\\set VERBOSITY verbose\n$call");
	like($err, qr/55000: ratelimit.store is "memory", but ratelimit was not loaded by shared_preload_libraries/,
		"$name: a clear error with SQLSTATE 55000");
	like($err, qr/HINT:  Add ratelimit to shared_preload_libraries and restart/, "$name: with a hint");
}
is($bare->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'), '0',
	'nothing was decided in rl_buckets');
$bare->stop;

# 2. switching table -> memory: a budget spent under the table store stays spent
my $node = PostgreSQL::Test::Cluster->new('memory_switch');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = table
});
$node->start;
$node->safe_psql('postgres', q{CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies VALUES ('login', 0.001, 1);
	SELECT rl_take('signup', 'ada', 0.001, 1)});
is($node->safe_psql('postgres', 'SELECT store, memory_slots, memory_used, table_buckets FROM rl_store_status()'),
	'table|||1', 'rl_store_status of the table store: no slots, one bucket in rl_buckets');
$node->append_conf('postgresql.conf', 'ratelimit.store = memory');
$node->restart;
is($node->safe_psql('postgres', q{SELECT allowed FROM rl_take('signup', 'ada', 0.001, 1)}),
	'f', 'after switching to the memory store the budget is still spent');
is($node->safe_psql('postgres', 'SELECT store, memory_used, table_buckets FROM rl_store_status()'),
	'memory|0|1', 'the key stays in rl_buckets, not in memory');
is($node->safe_psql('postgres', q{SELECT allowed FROM rl_take('signup', 'bob', 0.001, 1)}),
	't', 'a new key is decided');
is($node->safe_psql('postgres', 'SELECT memory_used, table_buckets FROM rl_store_status()'),
	'1|1', 'in memory');

# 3. a hot standby of a memory-store primary
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('memory_standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
for my $call (
	q{SELECT rl_take('signup', 'ada', 1, 1)},
	q{SELECT rl_take('signup', 'carol', 1, 1, 0)},
	q{SELECT rl_take_at('signup', 'ada', 1, 1, 1, now())},
	q{SELECT rl_reset('login', 'ada')},
	q{SELECT rl_take('login', 'ada')},
	q{SELECT rl_cleanup()})
{
	my ($name) = $call =~ /SELECT (\w+)/;
	my ($ret, $out, $err) = $standby->psql('postgres', "\\set VERBOSITY verbose\n$call");
	isnt($ret, 0, "$call fails on a standby");
	like($err, qr/25006: $name cannot run on a hot standby/, "$call says why, with SQLSTATE 25006");
}
$standby->stop;
$node->stop;
done_testing();
