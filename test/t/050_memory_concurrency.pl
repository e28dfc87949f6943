# The memory store under concurrency: 30 connections on one key allow exactly
# the burst, a hot key raises no error.  Then memory far too small for the
# keys: every key still gets exactly its burst, the keys that found no room
# live in rl_buckets (and nowhere else), expired slots are reused, and only a
# decision that must go to rl_buckets fails in a read-only transaction.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use Hammer;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_concurrency');
$node->init;
$node->append_conf('postgresql.conf', qq{
max_connections = 60
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.memory_buckets = 64
ratelimit.cleanup_interval = 0
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE TABLE outcome (limiter text, k integer, allowed boolean);
	CREATE SEQUENCE next_key;
});

sub query { return $node->safe_psql('postgres', shift); }

sub status
{
	return query('SELECT store, memory_slots, memory_used, table_buckets FROM rl_store_status()');
}

# the stored key of (limiter, key), to find a bucket in rl_buckets
sub in_table
{
	my ($limiter, $key) = @_;
	return query(qq{SELECT count(*) FROM rl_buckets WHERE key =
		sha256(convert_to('$limiter', 'UTF8') || '\\x00'::bytea || convert_to('$key', 'UTF8'))});
}

# 1. one key, 30 connections in 3 processes, all racing for the first slot
hammer($node, q{
INSERT INTO outcome SELECT 'sign_in', 0, (rl_take('sign_in', 'ada@example.com', 0.001, 7)).allowed;
}, 3, 40);
is(query("SELECT count(*) FROM outcome"), '1200', 'every decision was made and recorded');
is(query("SELECT count(*) FROM outcome WHERE allowed"), '7',
	'exactly the burst of 7 was allowed across 30 connections');
is(status(), 'memory|64|1|0', 'the bucket lives in memory, rl_buckets is empty');

# 2. a hot key from 8 clients: allowed and denied decisions, no error
hammer($node, q{
SELECT rl_take('hot', 'one key', 1000, 50);
}, 1, 2000, 8);
is(in_table('hot', 'one key'), '0', 'the hot key never reached rl_buckets');

# 3. expired slots are reused: 200 buckets of five seconds fill the 64 slots
# and spill 136 rows; once they have passed, new keys take the slots again
query(q{SELECT rl_reset('sign_in', 'ada@example.com'), rl_reset('hot', 'one key')});
query(q{SELECT rl_take('short', k::text, 0.2, 1) FROM generate_series(1, 200) k});
is(status(), 'memory|64|64|136', '64 buckets in memory, 136 in rl_buckets');
$node->poll_query_until('postgres',
	'SELECT memory_used = 0 FROM rl_store_status()')
  or die 'the one-second buckets did not pass';
query(q{SELECT rl_take('short2', k::text, 0.2, 1) FROM generate_series(1, 20) k});
is(status(), 'memory|64|20|136',
	'20 new keys went to expired slots, none to rl_buckets');

# rl_cleanup frees passed buckets in both places and counts them all
sleep(6);
is(query('SELECT rl_cleanup()'), '200', 'rl_cleanup counts the 64 passed slots and 136 rows');
is(status(), 'memory|64|0|0', 'nothing left');
is(query('SELECT rl_cleanup()'), '0', 'and a second run finds nothing');

# 4. 1 000 live keys for 64 slots, hammered by 3 processes of 10 connections
# cycling over all of them: each key is decided 6 times, burst 2
query('TRUNCATE outcome');
hammer($node, q{
INSERT INTO outcome SELECT 'full', k, (rl_take('full', k::text, 0.001, 2)).allowed
FROM (SELECT nextval('next_key') % 1000 AS k) s;
}, 3, 200);
is(query("SELECT count(*), count(DISTINCT k) FROM outcome"), '6000|1000',
	'6000 decisions over 1000 keys');
is(query(q{SELECT count(*) FROM (SELECT k FROM outcome GROUP BY k
	HAVING count(*) FILTER (WHERE allowed) = 2) s}),
	'1000', 'every key was allowed exactly its burst of 2, none more, none less');
my ($store, $slots, $used, $table) = split /\|/, status();
is($used, '64', 'memory is full');
cmp_ok($table, '>', 0, 'keys that found no room live in rl_buckets');
is($used + $table, 1000, 'and each of the 1000 keys lives in exactly one place');

# which keys live where
my @table_keys = split /\n/, query(q{SELECT k FROM generate_series(0, 999) k
	WHERE EXISTS (SELECT FROM rl_buckets WHERE key =
		sha256(convert_to('full', 'UTF8') || '\x00'::bytea || convert_to(k::text, 'UTF8')))
	ORDER BY k});
my %in_table = map { $_ => 1 } @table_keys;
my ($memory_key) = grep { !$in_table{$_} } 0 .. 999;
is(scalar(@table_keys), $table, 'rl_store_status counts the rows of rl_buckets');

# 5. a read-only transaction decides in memory; only what must go to
# rl_buckets fails
sub read_only
{
	my ($call) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', qq{\\set VERBOSITY verbose
BEGIN;
SET TRANSACTION READ ONLY;
SELECT allowed FROM $call;
COMMIT;});
	return ($ret, $out, $err);
}
my ($ret, $out, $err) = read_only("rl_take('full', '$memory_key', 0.001, 2)");
is($ret, 0, 'a key in memory is decided in a read-only transaction') or diag($err);
is($out, 'f', 'and its budget is still spent');
($ret, $out, $err) = read_only("rl_take('full', '$table_keys[0]', 0.001, 2)");
like($err, qr/25006: cannot execute rl_take in a read-only transaction/,
	'a key in rl_buckets fails with 25006');
($ret, $out, $err) = read_only(q{rl_take('full', 'a new key', 0.001, 2)});
like($err, qr/25006: cannot execute rl_take in a read-only transaction/,
	'a new key that finds no room fails with 25006');
is(in_table('full', 'a new key'), '0', 'and is not stored');
($ret, $out, $err) = read_only("rl_take('full', '$table_keys[0]', 0.001, 2, 0)");
is($ret, 0, 'a peek at a key in rl_buckets writes nothing and is answered') or diag($err);

$node->stop;
done_testing();
