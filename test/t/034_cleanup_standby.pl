# A hot standby with the library preloaded starts no cleanup and logs no
# error (its unlogged buckets are unreadable); once promoted, it cleans.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(sleep);
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.cleanup_interval = '1s'
log_min_messages = debug1
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	SELECT rl_take_at('login', 'ada', 1, 1, 1, now() - interval '1 hour');
});
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

sub workers
{
	return shift->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'ratelimit cleanup%'});
}

is($standby->safe_psql('postgres', 'SHOW ratelimit.cleanup_interval'), '1s',
	'the standby has the library preloaded and a one-second interval');
is(workers($primary), '1', 'the primary runs the launcher');
sleep(4);
is(workers($standby), '0', 'the standby runs no cleanup after 4 intervals');
unlike(slurp_file($standby->logfile),
	qr/starting background worker process "ratelimit|ratelimit cleanup (deleted|skipped)|\b(ERROR|FATAL|WARNING|PANIC):/,
	'and its log has no error and no word of cleanup');

$standby->promote;
ok($standby->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ratelimit cleanup launcher'}),
	'once promoted, it starts the launcher');
$standby->safe_psql('postgres', q{
	SELECT rl_take_at('login', 'bob', 1, 1, 1, now() - interval '1 hour');
	SELECT rl_take_at('login', 'cy', 1, 1, 1, now() + interval '1 hour');
});
ok($standby->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM rl_buckets WHERE tat > now()}),
	'and cleans: the expired bucket goes, the live one stays');

$standby->stop;
$primary->stop;
done_testing();
