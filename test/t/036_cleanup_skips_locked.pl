# Cleanup never waits on a locked row: an open transaction that holds one
# expired bucket's row lock (a decision on it, not yet committed) neither
# stops rl_cleanup() nor the worker, and they never keep the locks of the
# other buckets they delete while waiting, so decisions on those keys answer
# at once.  The locked bucket is the last of its batch, where a batch that
# waited would already hold every other one.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('skiplocked');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.cleanup_interval = 0
ratelimit.cleanup_batch_size = 100
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

# 50 buckets of limiter that expired an hour ago, keys 1 to 50 in table order
sub expired_buckets
{
	my ($limiter) = @_;
	$node->safe_psql('postgres', qq{
		SELECT rl_take_at('$limiter', i::text, 1, 1, 1, now() - interval '1 hour')
		FROM generate_series(1, 50) AS i});
}

# how many of keys 1 to 49 of limiter still have a bucket
sub remaining_buckets
{
	my ($limiter) = @_;
	return qq{(SELECT count(*) FROM rl_buckets WHERE key IN (
			SELECT sha256(convert_to('$limiter', 'UTF8') || '\\x00'::bytea || convert_to(i::text, 'UTF8'))
			FROM generate_series(1, 49) AS i))};
}

# a decision on another expired key, given 5 s where it needs milliseconds
sub take_at_once
{
	my ($limiter, $key, $name) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET statement_timeout = '5s'; SELECT allowed FROM rl_take('$limiter', '$key', 1, 1)");
	is($ret, 0, $name) or diag($err);
}

my $holder = $node->background_psql('postgres');
$holder->query_safe('SET ratelimit.in_transaction = allow');

# rl_cleanup()
expired_buckets('a');
$holder->query_safe(q{BEGIN; SELECT rl_take('a', '50', 1, 1)});
my ($ret, $out, $err) = $node->psql('postgres',
	"SET statement_timeout = '5s'; SELECT rl_cleanup()");
is($ret, 0, 'rl_cleanup() does not wait for the locked bucket') or diag($err);
is($out, '49', 'it deletes the other expired buckets');
take_at_once('a', '1', 'a decision on one of them answers at once');
$holder->query_safe('COMMIT');

# the worker
expired_buckets('b');
$holder->query_safe(q{BEGIN; SELECT rl_take('b', '50', 1, 1)});
$node->safe_psql('postgres', q{ALTER SYSTEM SET ratelimit.cleanup_interval = '1s'; SELECT pg_reload_conf()});
# done, or stuck on the lock
$node->poll_query_until('postgres', q{
	SELECT EXISTS (SELECT FROM pg_stat_activity
				   WHERE backend_type = 'ratelimit cleanup' AND wait_event_type = 'Lock')
		OR } . remaining_buckets('b') . ' = 0')
  or die 'the worker neither cleaned nor waited';
is($node->safe_psql('postgres', 'SELECT ' . remaining_buckets('b')), '0',
	'the worker deletes the other expired buckets');
take_at_once('b', '1', 'a decision on one of them answers at once');
$holder->query_safe('COMMIT');
$holder->quit;

$node->stop;
done_testing();
