# A memory-store decision writes nothing: 10 000 of them in one transaction
# assign no transaction id, write no WAL and no row of rl_buckets; a rollback
# does not undo one, and a read-only transaction decides.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_nothing_written');
$node->init;
# nothing else writes WAL: no standby records, no autovacuum, no worker
$node->append_conf('postgresql.conf', qq{
wal_level = minimal
max_wal_senders = 0
autovacuum = off
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.cleanup_interval = 0
});
$node->start;
# no dead catalog tuples left whose pruning would write WAL
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
$node->safe_psql('postgres', 'VACUUM');

# The session reads every catalog page it needs before the first position,
# and a checkpoint writes out all WAL so far: pg_current_wal_lsn() (written)
# and pg_current_wal_insert_lsn() (inserted) stand still unless we insert.
my $out = $node->safe_psql('postgres', q{
SELECT rl_take('warm', 'up', 1, 1);
SELECT n_tup_ins FROM pg_stat_xact_user_tables WHERE relname = 'rl_buckets';
SELECT pg_current_wal_lsn() = pg_current_wal_insert_lsn();
CHECKPOINT;
BEGIN;
SELECT pg_current_wal_lsn() || ' ' || pg_current_wal_insert_lsn() AS before \gset
SELECT count(*) FILTER (WHERE d.allowed), count(*)
FROM generate_series(1, 10000) i, rl_take('many', (i % 100)::text, 1, 50) d;
SELECT pg_current_wal_lsn() || ' ' || pg_current_wal_insert_lsn() AS after \gset
SELECT txid_current_if_assigned() IS NULL;
SELECT :'before', :'after';
SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_xact_user_tables
WHERE relname = 'rl_buckets';
COMMIT;
SELECT count(*) FROM rl_buckets;
});
my (undef, undef, undef, $decided, $xid, $lsn, $written, $table) = split /\n/, $out;
is($decided, '5000|10000', '10 000 decisions, 50 allowed for each of 100 keys');
is($xid, 't', 'no transaction id was assigned');
my ($before, $after) = split /\|/, $lsn;
is($after, $before, 'pg_current_wal_lsn() and pg_current_wal_insert_lsn() did not move');
is($written, '0', 'no row of rl_buckets was inserted, updated or deleted');
is($table, '0', 'rl_buckets is empty');

# a rollback leaves the decision standing
is($node->safe_psql('postgres', q{
BEGIN;
SELECT allowed FROM rl_take('rollback', 'k', 0.001, 1);
ROLLBACK;
SELECT allowed FROM rl_take('rollback', 'k', 0.001, 1);
}), "t\nf", 'the decision stands after ROLLBACK: the next one is denied');

# a read-only transaction decides
is($node->safe_psql('postgres', q{
BEGIN;
SET TRANSACTION READ ONLY;
SELECT allowed FROM rl_take('read only', 'k', 0.001, 1);
SELECT allowed FROM rl_take('read only', 'k', 0.001, 1);
COMMIT;
SELECT allowed FROM rl_take('read only', 'k', 0.001, 1);
}), "t\nf\nf", 'SET TRANSACTION READ ONLY, then rl_take decides and the decision stands');

$node->stop;
done_testing();
