# The memory store across restarts: a clean shutdown saves every live bucket
# to a file only the server's user can read, the next start loads it; an
# immediate shutdown starts empty; a truncated file, random bytes and another
# cluster's or another major version's file are logged and ignored; a start with the table store removes
# the file, and a file older than the shutdown the server starts from is not
# loaded.  A locked key's lock survives a clean restart; a file of the format
# before the lock is refused.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.memory_buckets = 1024
ratelimit.cleanup_interval = 0
restart_after_crash = on
};
my $node = PostgreSQL::Test::Cluster->new('memory_restart');
$node->init;
$node->append_conf('postgresql.conf', $conf);
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $file = $node->data_dir . '/ratelimit_buckets';

sub query { return $node->safe_psql('postgres', shift); }

# spend the whole burst of 300 keys; answers how many of them were allowed
sub spend
{
	return query(q{SELECT count(*) FILTER (WHERE (rl_take('restart', k::text, 0.001, 1)).allowed)
		FROM generate_series(1, 300) k});
}

is(spend(), '300', 'each of 300 keys allowed once');
$node->restart;		# -m fast
is(query(q{SELECT memory_used FROM rl_store_status()}), '300',
	'after pg_ctl restart -m fast the 300 buckets are back');
is(spend(), '0', 'and every budget is still spent');
ok(!-e $file, 'the save file is removed once loaded');
ok($node->log_contains('loaded 300 of 300 buckets saved at shutdown'),
	'the start logs what it loaded');

$node->stop;
ok(-e $file, 'a clean shutdown writes the save file');
is(sprintf('%04o', (stat $file)[2] & 07777), '0600', 'readable by the server user only');
$node->start;
is(spend(), '0', 'loaded again');

$node->stop('immediate');
$node->start;
is(query(q{SELECT memory_used FROM rl_store_status()}), '0',
	'after -m immediate the store starts empty');
is(spend(), '300', 'with every budget full');

# a backend that crashes restarts every process: the store starts empty, and
# a clean shutdown afterwards saves it again
spend();
my $crash_offset = -s $node->logfile;
my $victim = $node->background_psql('postgres');
kill 'KILL', $victim->query_safe('SELECT pg_backend_pid()');
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $crash_offset);
$node->poll_query_until('postgres', 'SELECT true') or die 'the server did not come back';
is(query(q{SELECT memory_used FROM rl_store_status()}), '0', 'after a crash the store starts empty');
is(spend(), '300', 'with every budget full');
$node->restart;
is(spend(), '0', 'and a clean restart after the crash keeps the buckets again');
eval { $victim->quit };

my $damaged_offset = -s $node->logfile;

# start with a damaged FILE (made by damage, given the good file's bytes):
# the server logs REASON, ignores the file and runs, empty
sub damaged
{
	my ($name, $reason, $damage) = @_;
	$node->stop;
	my $good = slurp_file($file);
	open my $fh, '>:raw', $file or die $!;
	print $fh $damage->($good);
	close $fh;
	my $offset = -s $node->logfile;
	$node->start;
	ok($node->log_contains(qr/ignoring the saved buckets in "ratelimit_buckets": $reason/, $offset),
		"$name: logged and ignored");
	is(query(q{SELECT memory_used FROM rl_store_status()}), '0', "$name: the store starts empty");
	is(spend(), '300', "$name: every budget is full");
	ok(!-e $file, "$name: the file is removed");
}

damaged('a truncated file', 'its length does not match its header',
	sub { substr($_[0], 0, int(length($_[0]) / 2)) });
damaged('a file cut inside its header', 'it is too short', sub { substr($_[0], 0, 10) });
damaged('random bytes', 'it is not a save file of this version of ratelimit',
	sub { join '', map { chr(int(rand(256))) } 1 .. length($_[0]) });
my $major = int(query('SHOW server_version_num') / 10000);
damaged('a file of another major version',
	'it was written by PostgreSQL ' . ($major - 1) . ", and this server runs PostgreSQL $major",
	sub { my $s = $_[0]; substr($s, 28, 4) = pack('V', $major - 1); $s });
damaged('one byte flipped', 'its checksum does not match',
	sub { my $s = $_[0]; substr($s, 100, 1) = chr(ord(substr($s, 100, 1)) ^ 1); $s });

# another cluster's file, with buckets of the same database and key
my $other = PostgreSQL::Test::Cluster->new('memory_restart_other');
$other->init;
$other->append_conf('postgresql.conf', $conf);
$other->start;
$other->safe_psql('postgres', q{CREATE EXTENSION ratelimit;
	SELECT rl_take('restart', k::text, 0.001, 1) FROM generate_series(1, 300) k});
$other->stop;
damaged("another cluster's file", 'it was saved by another cluster',
	sub { slurp_file($other->data_dir . '/ratelimit_buckets') });

ok(!$node->log_contains(qr/terminated by signal|was terminated/, $damaged_offset),
	'no process crashed on a damaged file');

# a start with the table store removes the save file: its buckets are out of
# date once decisions are made in rl_buckets
$node->stop;
ok(-e $file, 'saved');
$node->append_conf('postgresql.conf', 'ratelimit.store = table');
my $offset = -s $node->logfile;
$node->start;
ok(!-e $file, 'a start with the table store removes the save file');
ok($node->log_contains(qr/removed the saved buckets in "ratelimit_buckets": ratelimit.store is "table"/, $offset),
	'and says so');
$node->stop;

# a table-store period without the library loaded removes nothing; the file
# it leaves is not loaded later: it was not written by the shutdown the
# server then starts from.  Meanwhile the keys were reset in rl_buckets.
$node->append_conf('postgresql.conf', 'ratelimit.store = memory');
$node->start;
spend();
$node->stop;
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = ''
ratelimit.store = table});
$node->start;
ok(-e $file, 'without the library loaded the save file stays');
query(q{SELECT rl_reset('restart', k::text) FROM generate_series(1, 300) k});
$node->stop;
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = 'ratelimit'
ratelimit.store = memory});
$offset = -s $node->logfile;
$node->start;
ok($node->log_contains(qr/ignoring the saved buckets in "ratelimit_buckets": it was not written by the shutdown this server starts from/, $offset),
	'back with the memory store, the older file is refused');
ok(!-e $file, 'and removed');
is(spend(), '300', 'the budgets are those of the table-store period: full');

# 1.3's lock survives a clean restart, exactly, also when the key's tat has
# passed: the key is kept (and saved) until it is forgiven
my $at = query(q{SELECT now() - interval '1 minute'});
query(qq{INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('pin', 1000, 1, '1 hour');
	SELECT rl_take_at('pin', 'card', 1, '$at'), rl_take_at('pin', 'card', 1, '$at')});
my $inspect = q{SELECT store, lock_until, lock_us FROM rl_inspect('pin', 'card')};
my $locked = query($inspect);
is($locked, query(qq{SELECT 'memory|' || (timestamptz '$at' + interval '1 hour') || '|3600000000'}),
	'a key locked for an hour, its tat passed');
$node->restart;
is(query($inspect), $locked, 'after a clean restart its lock_until and lock_us are as they were');
is(query(q{SELECT allowed FROM rl_take('pin', 'card')}), 'f', 'and it is still locked');

# a save file of 1.2's format (version 2, slots without the lock) is refused, never misread
damaged('a file of the previous format', 'it is not a save file of this version of ratelimit',
	sub { my $s = $_[0]; substr($s, 4, 4) = pack('V', 2); $s });
is(query($inspect), '||', 'the locked key is not in memory');
$node->stop;
done_testing();
