# Three processes with 30 connections in all hammer one key at a slow rate:
# exactly the burst is allowed, and another limiter on the same key keeps its
# own budget.  Then many allowed decisions race on one row, and resets race
# with decisions.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::Bin;
use Hammer;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 60");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE TABLE outcome (limiter text, allowed boolean);
});

sub query { return $node->safe_psql('postgres', shift); }

# each transaction decides on both limiters for the same key, which starts
# absent: the first decisions race to insert it
hammer($node, q{
INSERT INTO outcome SELECT 'sign_in', (rl_take('sign_in', 'ada@example.com', 0.001, 7)).allowed;
INSERT INTO outcome SELECT 'reset', (rl_take('password_reset', 'ada@example.com', 0.001, 7)).allowed;
}, 3, 40);

is(query("SELECT count(*) FROM outcome WHERE limiter = 'sign_in'"),
	'1200', 'every sign-in decision was made and recorded');
is(query("SELECT count(*) FROM outcome WHERE limiter = 'sign_in' AND allowed"),
	'7', 'exactly the burst of 7 was allowed across 30 connections');
is(query("SELECT count(*) FROM outcome WHERE limiter = 'reset' AND allowed"),
	'7', 'another limiter on the same key had its own 7');
is(query('SELECT count(*) FROM rl_buckets'), '2', 'two buckets, one per limiter');

# many allowed decisions racing on one row: every one is stored exactly once,
# and the denials write nothing.  Backends flush their counters when they
# exit, so wait for the last run's to be gone before resetting them.
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()})
  or die 'pgbench connections did not end';
query(q{TRUNCATE outcome; SELECT pg_stat_reset()});
hammer($node, q{
INSERT INTO outcome SELECT 'hot', (rl_take('hot', 'one key', 0.001, 500)).allowed;
}, 3, 40);
is(query("SELECT count(*) FROM outcome WHERE allowed"),
	'500', 'exactly the burst of 500 was allowed out of 1200');
# An INSERT ... ON CONFLICT DO NOTHING that loses the race for the first row
# after its check counts its speculative row as inserted and deleted.
my $writes = q{SELECT n_tup_ins - n_tup_del + n_tup_upd FROM pg_stat_user_tables
	WHERE relname = 'rl_buckets'};
$node->poll_query_until('postgres', "SELECT ($writes) >= 500", 't');
is(query($writes), '500', 'one row write per allowed decision, none for the 700 denials');

# resets racing with decisions: no error, no lost row
hammer($node, q{
SELECT rl_take('race', 'k', 1000, 5);
SELECT rl_reset('race', 'k');
SELECT rl_take('race', 'k', 1000, 5);
}, 2, 50);
cmp_ok(query(q{SELECT count(*) FROM rl_buckets WHERE key =
	sha256(convert_to('race', 'UTF8') || '\x00'::bytea || convert_to('k', 'UTF8'))}),
	'<=', 1, 'at most one bucket for the key afterwards');

$node->stop;
done_testing();
