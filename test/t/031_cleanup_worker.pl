# The cleanup worker, preloaded, with a one-second interval: it deletes the
# expired buckets of every database that has the extension and keeps the
# others, skips a database without the extension, picks up one where the
# extension is created later, and carries on without errors when the
# extension or a database is dropped.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('cleanup');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.cleanup_interval = '1s'
log_min_messages = debug1
});
$node->start;

sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }

# buckets(DB, EXPIRED, LIVE): that many buckets whose tat has passed (an hour
# ago) and whose tat is ahead (in an hour, and in a minute)
sub buckets
{
	my ($db, $expired, $live) = @_;
	query($db, qq{
		INSERT INTO rl_buckets
		SELECT sha256(convert_to('$db old ' || i, 'UTF8')), now() - interval '1 hour', 1000000
		FROM generate_series(1, $expired) AS i;
		INSERT INTO rl_buckets
		SELECT sha256(convert_to('$db new ' || i, 'UTF8')),
			   now() + CASE WHEN i % 2 = 0 THEN interval '1 hour' ELSE interval '1 minute' END,
			   1000000
		FROM generate_series(1, $live) AS i;
	});
}

# errors(OFFSET): the log's errors, warnings and fatal errors after OFFSET
sub errors
{
	my $log = slurp_file($node->logfile, shift);
	return join '', grep { /\b(ERROR|WARNING|FATAL|PANIC):/ } split /^/m, $log;
}

is(query('postgres', 'SHOW ratelimit.cleanup_interval'), '1s', 'interval from postgresql.conf');
is(query('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'ratelimit cleanup launcher' AND datname IS NULL}),
	'1', 'one launcher in pg_stat_activity, connected to no database');

my $offset = -s $node->logfile;
for my $db (qw(db1 db2 db3))
{
	query('postgres', "CREATE DATABASE $db");
}
query($_, 'CREATE EXTENSION ratelimit') for qw(db1 db2);
buckets('db1', 5, 3);
buckets('db2', 7, 2);

$node->wait_for_log(qr/LOG:  ratelimit cleanup deleted 5 expired buckets in database "db1" in \d+\.\d{3} s$/m, $offset);
$node->wait_for_log(qr/LOG:  ratelimit cleanup deleted 7 expired buckets in database "db2" in \d+\.\d{3} s$/m, $offset);
is(query('db1', q{SELECT count(*) FROM rl_buckets WHERE tat > now()}), '3',
	'db1: the 3 live buckets stay');
is(query('db1', q{SELECT count(*) FROM rl_buckets}), '3', 'db1: the 5 expired are gone');
is(query('db2', q{SELECT count(*) FROM rl_buckets WHERE tat > now()}), '2',
	'db2: the 2 live buckets stay');
is(query('db2', q{SELECT count(*) FROM rl_buckets}), '2', 'db2: the 7 expired are gone');

# later rounds find nothing: at DEBUG1 only, never at LOG
$node->wait_for_log(qr/DEBUG:  ratelimit cleanup deleted 0 expired buckets in database "db1"/, $offset);
$node->wait_for_log(qr/DEBUG:  ratelimit cleanup skipped database "db3": the extension is not installed/, $offset);
unlike(slurp_file($node->logfile, $offset), qr/LOG:  ratelimit cleanup deleted 0 /,
	'a round that deletes nothing logs only at DEBUG1');
unlike(slurp_file($node->logfile, $offset), qr/LOG: .*"db3"/,
	'db3, without the extension, is skipped quietly');
unlike(slurp_file($node->logfile, $offset), qr/ratelimit cleanup .*"template[01]"/,
	'templates are not cleaned');
is(errors($offset), '', 'no error, warning or fatal error so far');

# durable buckets (1.3): rl_buckets_durable is cleaned in the same run, and
# the run counts both tables
$offset = -s $node->logfile;
query('db2', q{
	INSERT INTO rl_buckets_durable (key, tat, interval_us)
	SELECT sha256(convert_to('durable ' || i, 'UTF8')),
		   now() + CASE WHEN i <= 4 THEN interval '-1 hour' ELSE interval '1 hour' END, 1000000
	FROM generate_series(1, 6) AS i;
	INSERT INTO rl_buckets VALUES (sha256('\x00'), now() - interval '1 hour', 1000000);
});
# (wait_for_log fails the test when no run logs that count)
ok($node->wait_for_log(qr/LOG:  ratelimit cleanup deleted 5 expired buckets in database "db2"/, $offset),
	'db2: one run deletes and counts both tables (4 durable, 1 in rl_buckets), as rl_cleanup_runs records it');
is(query('db2', q{SELECT count(*) FROM rl_buckets_durable}), '2',
	'db2: the 4 expired durable buckets are gone, the 2 live ones stay');

# the extension created later is picked up at a following round
$offset = -s $node->logfile;
query('db3', 'CREATE EXTENSION ratelimit');
buckets('db3', 4, 1);
$node->wait_for_log(qr/LOG:  ratelimit cleanup deleted 4 expired buckets in database "db3"/, $offset);
is(query('db3', q{SELECT count(*) FROM rl_buckets}), '1', 'db3: the expired buckets are gone');

# the extension dropped: later rounds skip db1 without error
$offset = -s $node->logfile;
query('db1', 'DROP EXTENSION ratelimit');
my $skipped = qr/DEBUG:  ratelimit cleanup skipped database "db1"/;
$node->wait_for_log(qr/$skipped.*$skipped/s, $offset);
is(errors($offset), '', 'after DROP EXTENSION, two rounds skip db1 without error');

# a database dropped: later rounds go on without error.  A round that listed
# it before the drop may start its worker as the drop commits, which then
# fails to connect: no fault.  That round has ended by the second round that
# skips db1 after the drop, so look only after that one.
query('postgres', 'DROP DATABASE db2');
$offset = -s $node->logfile;
$node->wait_for_log(qr/$skipped.*$skipped/s, $offset);
$offset = -s $node->logfile;
$node->wait_for_log(qr/$skipped.*$skipped/s, $offset);
unlike(slurp_file($node->logfile, $offset), qr/"db2"/, 'the dropped database is no longer visited');
is(errors($offset), '', 'after DROP DATABASE, two rounds go on without error');

# and cleaning still works where the extension remains
$offset = -s $node->logfile;
buckets('db3', 6, 0);
$node->wait_for_log(qr/LOG:  ratelimit cleanup deleted 6 expired buckets in database "db3"/, $offset);
is(query('db3', q{SELECT count(*) FROM rl_buckets}), '1', 'db3 is still cleaned');

$node->stop;
done_testing();
