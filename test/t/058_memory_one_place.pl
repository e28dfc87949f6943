# The memory store keeps each key in one place and decides it there: an
# rl_take_all over keys in memory and in rl_buckets moves no bucket (a
# rollback undoes only its rl_buckets part, and a concurrent rl_take of its
# memory keys never waits), keys in rl_buckets follow ratelimit.in_transaction
# and read-only transactions, a denial or an all-peek call writes nothing, a
# call on a key another transaction is putting in rl_buckets waits
# cancellably while the set's other keys are decided, a new key never takes
# the slot of another key of the same call, and a row deleted by cleanup
# under a waiting call is not put back beside a slot.  A transaction that
# spills many keys holds no key lock per key until it commits: the lock
# table would run out ("out of shared memory").
use strict;
use warnings;
use Digest::SHA qw(sha256);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_one_place');
$node->init;
# 16 slots: one set, which the tests fill
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.memory_buckets = 16
ratelimit.cleanup_interval = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub query { return $node->safe_psql('postgres', shift); }

# where (limiter, key) lives: "memory", "table", "both" or "" (nowhere)
sub place
{
	my ($limiter, $key) = @_;
	return query(qq{
		SELECT CASE WHEN m AND t THEN 'both' WHEN m THEN 'memory' WHEN t THEN 'table' ELSE '' END
		FROM (SELECT coalesce((SELECT store = 'memory' FROM rl_inspect('$limiter', '$key')), false) AS m,
					 EXISTS (SELECT FROM rl_buckets WHERE key =
						 sha256(convert_to('$limiter', 'UTF8') || '\\x00'::bytea || convert_to('$key', 'UTF8'))) AS t) s});
}

# the cells left of a key of burst 3 at one cell per 10^6 s (a peek)
sub remaining
{
	my ($key) = @_;
	return query(qq{SELECT remaining FROM rl_take('t', '$key', 0.000001, 3, 0)});
}

sub take_all
{
	my ($keys, $costs) = @_;
	my $n = scalar @$keys;
	my $array = join(',', map { "'$_'" } @$keys);
	$costs = $costs ? "ARRAY[$costs]" : 'NULL';
	return qq{SELECT allowed, remaining FROM rl_take_all(array_fill('t'::text, ARRAY[$n]), ARRAY[$array],
		array_fill(0.000001::float8, ARRAY[$n]), array_fill(3, ARRAY[$n]), $costs)};
}

# 14 live fillers, m spent (3 of 3), m2 with one cell spent: the set is full,
# so the new key s goes to rl_buckets
query(q{SELECT count(rl_take('filler', i::text, 0.000001, 1)) FROM generate_series(1, 14) i});
query(q{SELECT rl_take('t', 'm', 0.000001, 3, 3)});
query(q{SELECT rl_take('t', 'm2', 0.000001, 3)});
query(q{SELECT rl_take('t', 's', 0.000001, 3)});
is(place('t', 'm') . ',' . place('t', 'm2') . ',' . place('t', 's'), 'memory,memory,table',
	'm and m2 live in memory, s in rl_buckets');

# a denied call over m and s, rolled back: m stays spent, in memory
query('BEGIN; ' . take_all([ 'm', 's' ]) . '; ROLLBACK');
is(place('t', 'm'), 'memory', 'a rolled-back denial over m and s leaves m in memory');
is(query(qq{SELECT allowed FROM rl_take('t', 'm', 0.000001, 3)}), 'f', 'and m still spent');

# an allowed call over m2 and s in an open transaction: a plain rl_take of m2
# answers at once, the rollback undoes the cell of s only
my $open = $node->background_psql('postgres');
$open->query_safe('SET ratelimit.in_transaction = allow');
is($open->query_safe('BEGIN; ' . take_all([ 'm2', 's' ])), 't|1', 'allowed in an open transaction');
my ($ret, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '5s'; SELECT remaining FROM rl_take('t', 'm2', 0.000001, 3)});
is($out, '0', 'another session decides m2 meanwhile without waiting for that transaction')
  or diag($err);
$open->query_safe('ROLLBACK');
is(place('t', 'm2') . ',' . place('t', 's'), 'memory,table', 'after the rollback m2 is in memory, s in rl_buckets');
is(remaining('m2'), '0', "m2 keeps every cell spent: memory decisions never roll back");
is(remaining('s'), '2', 's lost the rolled-back cell: it follows the table store');

# an immediate denial over m, s and a new key writes nothing anywhere
my $rows = query('SELECT count(*) FROM rl_buckets');
is(query(take_all([ 'm', 's', 'new' ])), 'f|0', 'a call over a spent key is denied');
is(query('SELECT count(*) FROM rl_buckets'), $rows, 'the denial wrote no row');
is(place('t', 'm') . ',' . place('t', 'new'), 'memory,', 'm stays in memory, the new key has no bucket');

# a call of peeks over m and s in a read-only transaction
($ret, $out, $err) = $node->psql('postgres', 'BEGIN READ ONLY; ' . take_all([ 'm', 's' ], '0, 0') . '; COMMIT');
is($out, 't|0', 'an all-peek call over a key in rl_buckets is answered in a read-only transaction')
  or diag($err);

# keys in rl_buckets follow ratelimit.in_transaction, keys in memory do not
for my $case (
	[ 'rl_take of a key in rl_buckets in a block',
	  q{BEGIN; SELECT rl_take('t', 's', 0.000001, 3); COMMIT}, qr/rl_take cannot run inside a transaction block/ ],
	[ 'rl_take of a key in rl_buckets in an exception block',
	  q{DO $$ BEGIN PERFORM rl_take('t', 's', 0.000001, 3); EXCEPTION WHEN division_by_zero THEN NULL; END $$},
	  qr/rl_take cannot run inside a subtransaction/ ],
	[ 'rl_take of a new key that finds no slot, in a block',
	  q{BEGIN; SELECT rl_take('t', 'spill', 0.000001, 3); COMMIT}, qr/rl_take cannot run inside a transaction block/ ],
	[ 'rl_take_all over keys in both places, in a block',
	  'BEGIN; ' . take_all([ 'm2', 's' ]) . '; COMMIT', qr/rl_take_all cannot run inside a transaction block/ ],
	[ 'rl_take_all with a new key that finds no slot, in an exception block',
	  'DO $$ BEGIN PERFORM ' . substr(take_all([ 'spill' ]), 7)
	  . '; EXCEPTION WHEN division_by_zero THEN NULL; END $$', qr/rl_take_all cannot run inside a subtransaction/ ],
	[ 'rl_refund of a key in rl_buckets in a block',
	  q{BEGIN; SELECT rl_refund('t', 's'); COMMIT}, qr/rl_refund cannot run inside a transaction block/ ])
{
	my ($name, $sql, $message) = @$case;
	$rows = query('SELECT count(*) FROM rl_buckets');
	my $before = remaining('s');
	($ret, $out, $err) = $node->psql('postgres', "SET ratelimit.in_transaction = error; $sql");
	like($err, $message, "in_transaction = error refuses $name");
	is(query('SELECT count(*) FROM rl_buckets') . ',' . remaining('s'), "$rows,$before",
		"$name: nothing written");
}
is($node->safe_psql('postgres', q{SET ratelimit.in_transaction = error;
	BEGIN; SELECT allowed FROM rl_take('t', 'm2', 0.000001, 3); SELECT allowed FROM rl_take_all(ARRAY['t', 't'],
	ARRAY['m', 'm2'], ARRAY[0.000001, 0.000001], ARRAY[3, 3]); COMMIT}), "f\nf",
	'but decides keys in memory inside a block');
is(place('t', 'spill'), '', 'the refused new key has no bucket');

# a new key that went to rl_buckets in an open transaction: a call on it
# waits as for a row lock, which statement_timeout ends, and the other keys
# of the set are decided meanwhile
$open->query_safe('SET ratelimit.in_transaction = allow');
is($open->query_safe(q{BEGIN; SELECT allowed FROM rl_take('t', 'held', 0.000001, 3)}), 't',
	'a new key goes to rl_buckets in an open transaction');
($ret, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '500ms'; SELECT allowed FROM rl_take('t', 'held', 0.000001, 3)});
like($err, qr/canceling statement due to statement timeout/, 'a call on that key waits, and can be cancelled');
($ret, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '5s'; SELECT allowed FROM rl_take('t', 'm2', 0.000001, 3)});
is($out, 'f', 'a key in memory of the same set is decided meanwhile') or diag($err);
$open->query_safe('COMMIT');
is(remaining('held'), '2', 'after the commit the key is in rl_buckets with its cell');

# a new key never takes the slot of another key of the same call: a passed
# bucket in the full set's last slot, and a call over it and a new key
$node->stop('immediate');
$node->start;
query(q{SELECT count(rl_take('filler', i::text, 0.000001, 1)) FROM generate_series(1, 15) i});
query(q{SELECT rl_take('t', 'a', 1000, 1)});
$node->poll_query_until('postgres', q{SELECT reset_after = 0 FROM rl_take('t', 'a', 1000, 1, 0)})
  or die 'the bucket of a did not pass';
is(query(q{SELECT allowed FROM rl_take_all(ARRAY['t', 't'], ARRAY['a', 'b'], ARRAY[0.000001, 0.000001], ARRAY[1, 1])}),
	't', 'a call over a passed key and a new key in a full set is allowed');
is(place('t', 'a') . ',' . place('t', 'b'), 'memory,table', 'a keeps its slot, b goes to rl_buckets');
is(query(q{SELECT allowed::text || ',' || (rl_take('t', 'b', 0.000001, 1)).allowed::text
	FROM rl_take('t', 'a', 0.000001, 1)}), 'false,false', 'both keys spent their burst of 1');

# a call waits for the row lock of k1 while cleanup deletes the passed row of
# k2 and another session takes k2, at once (the call holds no key lock while
# it waits): k2 still lives in one place.  The call's
# transaction stays open; a later call over both keys waits for it, and the
# other keys of the set are decided meanwhile: nothing waits under the set's
# LWLock
$node->stop('immediate');
$node->start;
my ($k1, $k2) = sort { sha256("t\0$a") cmp sha256("t\0$b") } ('k1', 'k2');
query(qq{INSERT INTO rl_buckets SELECT sha256(convert_to('t', 'UTF8') || '\\x00'::bytea || convert_to(k, 'UTF8')),
	now() - interval '1 hour', 1000000000000 FROM unnest(ARRAY['$k1', '$k2']) k});
my $holder = $node->background_psql('postgres');
$holder->query_safe(qq{BEGIN; SELECT FROM rl_buckets WHERE key =
	sha256(convert_to('t', 'UTF8') || '\\x00'::bytea || convert_to('$k1', 'UTF8')) FOR UPDATE});
my $all = $node->background_psql('postgres');
$all->query_safe(q{SET application_name = 'take_all'; SET ratelimit.in_transaction = allow; BEGIN});
my $all_out = $all->query_until(qr/taking/, "\\echo taking\n" . take_all([ $k1, $k2 ]) . ";\n");
$node->poll_query_until('postgres', q{SELECT wait_event_type = 'Lock' FROM pg_stat_activity
	WHERE application_name = 'take_all'}) or die 'rl_take_all does not wait for the row lock';
is(query('SELECT rl_cleanup()'), '1', "cleanup deletes the passed row of $k2 meanwhile");
($ret, $out, $err) = $node->psql('postgres',
	qq{SET statement_timeout = '5s'; SELECT allowed FROM rl_take('t', '$k2', 0.000001, 3)});
is($out, 't', "a concurrent rl_take of $k2 is allowed without waiting") or diag($err);
$holder->query_safe('COMMIT');
like($all_out . $all->query_safe('SELECT 1'), qr/^t\|1$/m, 'rl_take_all is allowed, after it');

my $blocked = $node->background_psql('postgres', on_error_stop => 0);
$blocked->query_safe(q{SET application_name = 'blocked'; SET statement_timeout = '3s'});
$blocked->query_until(qr/taking/, "\\echo taking\n" . take_all([ $k1, $k2 ]) . ";\n");
$node->poll_query_until('postgres', q{SELECT wait_event_type = 'Lock' FROM pg_stat_activity
	WHERE application_name = 'blocked'}) or die 'the second rl_take_all does not wait for a lock';
($ret, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '1s'; SELECT allowed FROM rl_take('t', 'other', 0.000001, 3)});
is($out, 't', 'a new key of the same set is decided while a call waits for an open transaction')
  or diag($err);
$blocked->query('SELECT 1');
like($blocked->{stderr}, qr/canceling statement due to statement timeout/,
	'and the waiting call ends at its statement_timeout');
$all->query_safe('COMMIT');

is(place('t', $k2), 'memory', "$k2 lives in one place");
is(remaining($k2), '1', "with both calls' cells");
$_->quit for ($open, $holder, $all, $blocked);

# The set is full of live buckets: every new key spills.  20 000 by rl_take
# and 20 000 by rl_take_all, in one transaction: more than the lock table
# holds (max_locks_per_transaction x connections, about 7 000 here).
my $placed = 'SELECT memory_used + table_buckets FROM rl_store_status()';
my $placed_before = query($placed);
is( query(q{
	BEGIN;
	SELECT count(*) FILTER (WHERE allowed) FROM (
		SELECT (rl_take('t', 'bulk' || k, 0.000001, 3)).allowed FROM generate_series(1, 20000) AS k
		UNION ALL
		SELECT (rl_take_all(array_fill('t'::text, ARRAY[16]),
							ARRAY(SELECT 'bulk_all' || (16 * c + i) FROM generate_series(1, 16) AS i),
							array_fill(0.000001::float8, ARRAY[16]), array_fill(3, ARRAY[16]))).allowed
		FROM generate_series(1, 1250) AS c) s;
	SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
	COMMIT;}),
	"21250\n0",
	'a transaction decides 40 000 new keys of a full set, holding no key lock once each has its place');
is(query($placed) - $placed_before, 40000, 'and every key has its place');
is(remaining('bulk7'), '2', 'a spilled key keeps its spent cell');

$node->stop;
done_testing();
