# rl_take decides on the newest committed state whatever the isolation level
# of the caller's transaction: a REPEATABLE READ transaction whose snapshot is
# older than another session's decisions still counts them, and does not fail.
# Then, in both stores, under default_transaction_isolation = serializable and
# = repeatable read, 4 connections make autocommit decisions at once on a hot
# key, on keys whose first rows they race to insert, by rl_take_all and with
# rl_refund: no call fails with a serialization error (or any other), and the
# decisions are exact.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use Hammer;
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

# One cell per 10^6 s: no bucket refills during a run.  Each fresh key lives
# for 10 ms of the clock, so the connections race to insert its first row.
my $script = q{
INSERT INTO outcome SELECT 'hot', 'one key', (rl_take('hot', 'one key', 0.000001, 500)).allowed;
INSERT INTO outcome SELECT 'fresh', k, (rl_take('fresh', k, 0.000001, 1000)).allowed
	FROM (SELECT (extract(epoch FROM clock_timestamp()) * 100)::bigint::text AS k) s;
INSERT INTO outcome SELECT 'all', 'k', (rl_take_all(ARRAY['all1', 'all2'], ARRAY['k', 'k'],
	ARRAY[0.000001, 0.000001], ARRAY[300, 300])).allowed;
INSERT INTO outcome SELECT 'refunded', 'k', (rl_take('refunded', 'k', 0.000001, 4)).allowed;
SELECT rl_refund('refunded', 'k');
};

for my $store (qw(table memory))
{
	my $node = PostgreSQL::Test::Cluster->new("isolation_$store");
	$node->init;
	# 16 slots: the memory store's keys beyond them are decided in rl_buckets
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = $store
ratelimit.memory_buckets = 16
ratelimit.cleanup_interval = 0
});
	$node->start;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		CREATE TABLE outcome (limiter text, key text, allowed boolean)});

	for my $level ('serializable', 'repeatable read')
	{
		my $name = "$store store, $level";
		$node->safe_psql('postgres', qq{
			ALTER DATABASE postgres SET default_transaction_isolation = '$level';
			TRUNCATE outcome});
		# a crash empties both stores
		$node->stop('immediate');
		$node->start;

		hammer($node, $script, 1, 1000, 4);

		my $query = sub { return $node->safe_psql('postgres', shift); };
		is($query->(q{SELECT current_setting('default_transaction_isolation')}), $level,
			"$name: the connections ran at that level");
		is($query->(q{SELECT count(*) FILTER (WHERE allowed) || '/' || count(*)
			FROM outcome WHERE limiter = 'hot'}), '500/4000',
			"$name: exactly the burst of the hot key was allowed");
		is($query->(q{SELECT count(*) FILTER (WHERE allowed) || '/' || count(*)
			FROM outcome WHERE limiter = 'all'}), '300/4000',
			"$name: and of the rl_take_all pair");
		is($query->(q{SELECT count(*) FILTER (WHERE allowed) || '/' || count(*)
			FROM outcome WHERE limiter = 'refunded'}), '4000/4000',
			"$name: every take followed by a refund was allowed");
		is($query->(q{SELECT remaining FROM rl_take('refunded', 'k', 0.000001, 4, 0)}), '4',
			"$name: and every cell came back");
		is($query->(q{SELECT count(*) FROM (SELECT key, count(*) AS n FROM outcome
			WHERE limiter = 'fresh' GROUP BY key) s
			WHERE (rl_take('fresh', key, 0.000001, 1000, 0)).remaining <> 1000 - n}), '0',
			"$name: each raced key kept one cell per decision");
		note("$name: " . $query->(q{SELECT count(DISTINCT key) FROM outcome WHERE limiter = 'fresh'})
			  . ' raced keys');
	}
	$node->stop;
}

done_testing();
