# A long run (half a million expired buckets, deleted 10 or 20 at a time): the
# worker shows what it does in pg_stat_activity, picks up a new batch size
# between batches, ends within a second on SIGTERM, ends with the launcher
# when the launcher is stopped (which the postmaster then restarts), and ends
# quietly when the extension is dropped under it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('large');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.cleanup_interval = 0
ratelimit.cleanup_batch_size = 10
});
$node->start;

sub query { return $node->safe_psql('postgres', shift); }

my $rows = 500000;

sub set_conf
{
	my ($name, $value) = @_;
	query(qq{ALTER SYSTEM SET ratelimit.$name = '$value'; SELECT pg_reload_conf()});
}

# fill(): $rows expired buckets, and a round every second
sub fill
{
	set_conf('cleanup_interval', '0');
	query(qq{
		TRUNCATE rl_buckets;
		INSERT INTO rl_buckets
		SELECT sha256(int8send(i)), now() - interval '1 hour', 1000000
		FROM generate_series(1, $rows) AS i});
	set_conf('cleanup_interval', '1s');
}

# running(): the pid of the cleanup worker once it has deleted some rows
sub running
{
	$node->poll_query_until('postgres', qq{
		SELECT count(*) < $rows FROM rl_buckets})
	  or die 'the cleanup did not start';
	return query(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'ratelimit cleanup'});
}

# terminate(PID, WATCHED): seconds from SIGTERM to PID until none of the
# WATCHED pids is in pg_stat_activity, measured in the server, where no
# client's start-up counts
query(q{
	CREATE FUNCTION seconds_to_end(signalled integer, watched integer[]) RETURNS float8
	LANGUAGE plpgsql AS $$
	DECLARE
		started timestamptz := clock_timestamp();
	BEGIN
		PERFORM pg_terminate_backend(signalled);
		LOOP
			PERFORM pg_stat_clear_snapshot();
			EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = ANY (watched))
				OR clock_timestamp() - started > interval '60 s';
			PERFORM pg_sleep(0.01);
		END LOOP;
		RETURN extract(epoch FROM clock_timestamp() - started);
	END $$});

sub terminate
{
	my ($pid, $watched) = @_;
	return query("SELECT seconds_to_end($pid, '{$watched}')");
}

sub errors
{
	my $log = slurp_file($node->logfile, shift);
	return join '', grep { /\b(ERROR|WARNING|FATAL|PANIC):/ } split /^/m, $log;
}

query('CREATE EXTENSION ratelimit');

# what pg_stat_activity shows
fill();
my $pid = running();
like($pid, qr/^\d+$/, 'one cleanup worker runs');
like(query(qq{SELECT datname || ' | ' || query FROM pg_stat_activity WHERE pid = $pid}),
	qr/^postgres \| deleting expired buckets in batches of 10: \d+ deleted so far$/,
	'pg_stat_activity shows its database and what it does');
is(query(q{SELECT state FROM pg_stat_activity WHERE backend_type = 'ratelimit cleanup launcher'}),
	'active', 'the launcher is active while a database is cleaned');

# a new batch size applies from the next batch
set_conf('cleanup_batch_size', '20');
ok($node->poll_query_until('postgres', qq{
	SELECT query LIKE '%in batches of 20:%' FROM pg_stat_activity WHERE pid = $pid}),
	'a reload changes the batch size of the running worker');

# SIGTERM to the worker
my $offset = -s $node->logfile;
my $seconds = terminate($pid, $pid);
cmp_ok($seconds, '<', 1, 'SIGTERM ends the worker within a second');
note("ended after $seconds s");
cmp_ok(query('SELECT count(*) FROM rl_buckets'), '>', 0, 'in the middle of its run');
like(slurp_file($node->logfile, $offset),
	qr/FATAL:  terminating background worker "ratelimit cleanup" due to administrator command/,
	'it logs why it ended');

# SIGTERM to the launcher: it stops its worker, and the postmaster restarts it
fill();
$pid = running();
my $launcher = query(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'ratelimit cleanup launcher'});
$seconds = terminate($launcher, "$launcher, $pid");
cmp_ok($seconds, '<', 1, 'SIGTERM to the launcher ends it and its worker within a second');
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'ratelimit cleanup launcher' AND pid <> $launcher}),
	'the postmaster starts the launcher again');
set_conf('cleanup_batch_size', '10000');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM rl_buckets'),
	'and cleaning resumes until every expired bucket is gone');

# DROP EXTENSION during a run: it waits for the batch, then the run ends
set_conf('cleanup_batch_size', '20');
fill();
$pid = running();
$offset = -s $node->logfile;
query('DROP EXTENSION ratelimit');
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
  or die 'the worker did not end';
like(slurp_file($node->logfile, $offset),
	qr/LOG:  ratelimit cleanup deleted \d+ expired buckets in database "postgres"/,
	'a run ends at DROP EXTENSION and logs what it deleted');
sleep(3);
is(errors($offset), '', 'with no error then or in the rounds that follow');

$node->stop;
done_testing();
