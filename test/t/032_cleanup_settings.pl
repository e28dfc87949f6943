# The cleanup settings: their defaults, a reload that changes the interval
# takes effect at once (not after the old interval), 0 disables the worker,
# and without shared_preload_libraries there is no worker while the settings
# and rl_cleanup() still work.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(sleep);
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('settings');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;

sub query { return $node->safe_psql('postgres', shift); }

# expire(N): N buckets whose tat passed an hour ago
sub expire
{
	my $n = shift;
	query(qq{
		INSERT INTO rl_buckets
		SELECT sha256(convert_to(clock_timestamp()::text || i, 'UTF8')), now() - interval '1 hour', 1000000
		FROM generate_series(1, $n) AS i});
}

sub set_interval
{
	query(qq{ALTER SYSTEM SET ratelimit.cleanup_interval = '$_[0]'; SELECT pg_reload_conf()});
}

sub buckets { return query('SELECT count(*) FROM rl_buckets'); }

is(query('SHOW ratelimit.cleanup_interval'), '1h', 'the interval is an hour by default');
is(query('SHOW ratelimit.cleanup_batch_size'), '10000', 'the batch size is 10000 by default');
is(query(q{SELECT string_agg(name || ' ' || context, ', ' ORDER BY name) FROM pg_settings
	WHERE name IN ('ratelimit.cleanup_interval', 'ratelimit.cleanup_batch_size')}),
	'ratelimit.cleanup_batch_size sighup, ratelimit.cleanup_interval sighup',
	'both change on reload');
my ($ret, $out, $err) = $node->psql('postgres', 'SET ratelimit.cleanup_interval = 1');
like($err, qr/cannot be changed now/, 'a session cannot set the interval');
($ret, $out, $err) = $node->psql('postgres', 'ALTER SYSTEM SET ratelimit.cleanup_batch_size = 0');
like($err, qr/0 is outside the valid range for parameter "ratelimit.cleanup_batch_size" \(1 \.\. 2147483647\)/,
	'a batch size below 1 is refused');
($ret, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET ratelimit.cleanup_interval = '-1s'});
like($err, qr/is outside the valid range for parameter "ratelimit.cleanup_interval"/,
	'a negative interval is refused');

query('CREATE EXTENSION ratelimit');
expire(5);
sleep(3);
is(buckets(), '5', 'with an hour between rounds, nothing is deleted yet');

# from an hour to a second: the worker, sleeping for an hour, wakes up now
set_interval('1s');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM rl_buckets'),
	'after a reload to 1s the expired buckets are deleted without waiting for the hour');

# 0 disables
set_interval('0');
sleep(2);
expire(4);
sleep(3);
is(buckets(), '4', 'with the interval at 0, nothing is deleted');

set_interval('2s');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM rl_buckets'),
	'back at 2s, the expired buckets are deleted');
$node->stop;

# without preloading: no worker, and everything else works
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	SELECT rl_take_at('login', 'ada', 1, 1, 1, now() - interval '1 hour');
	SELECT rl_take('login', 'bob', 1, 1);
});
is($plain->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'ratelimit%'}),
	'0', 'without shared_preload_libraries there is no cleanup worker');
is($plain->safe_psql('postgres', q{
		SELECT rl_take('login', 'cy', 1, 1) IS NOT NULL;
		SHOW ratelimit.cleanup_interval}),
	"t\n1h", 'the settings exist once the library is loaded');
is($plain->safe_psql('postgres', 'SELECT rl_cleanup()'), '1',
	'rl_cleanup() deletes the expired bucket');
is($plain->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'), '2',
	'and keeps the live ones');
$plain->stop;

done_testing();
