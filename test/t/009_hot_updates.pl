# The table store's updates of rl_buckets are HOT updates on every major, and
# a new row version gets exactly the index entries an UPDATE statement would
# make: none while only the primary key indexes the table, every index's
# when the owner adds an ordinary index on tat, and from 16 only a
# summarizing (BRIN) index's, which no longer stops HOT.  amcheck confirms
# that every row version is in the primary key, pageinspect that a HOT
# update added none to it; a BRIN scan finds the newest tat only if the
# summarizing index got its entry.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('hot');
$node->init;
$node->start;
my $major = $node->safe_psql('postgres', q{SELECT current_setting('server_version_num')::int / 10000});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit; CREATE EXTENSION amcheck; CREATE EXTENSION pageinspect');

# n_tup_upd and n_tup_hot_upd of rl_buckets, once the counts include at
# least $min_upd updates (each psql's backend reports them as it exits)
sub update_counts
{
	my ($min_upd) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT n_tup_upd >= $min_upd FROM pg_stat_user_tables WHERE relname = 'rl_buckets'})
	  or die "the statistics never counted $min_upd updates of rl_buckets";
	return split /\|/, $node->safe_psql('postgres', q{
		SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'rl_buckets'});
}

# $n decisions that each update the key's bucket, one statement each; each
# adds a second to tat (rate 1/s), so the newest tat lies in the future
my $updates = 0;
sub take
{
	my ($n, $what) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		join('', map { "SELECT (rl_take('hot', 'ada', 1, 1000)).allowed;\n" } 1 .. $n));
	is($rc, 0, "$what: $n decisions run") or diag($err);
	is($out, join("\n", ('t') x $n), "$what: all allowed");
	$updates += $n;
}

sub pkey_holds_every_version
{
	my ($what) = @_;
	is($node->psql('postgres',
		q{SELECT bt_index_check('rl_buckets_pkey'::regclass, heapallindexed => true)}),
		0, "$what: amcheck finds every row version in the primary key");
}

# the heap TIDs in the primary key's one leaf page (a posting list holds several)
sub pkey_entries
{
	return $node->safe_psql('postgres', q{
		SELECT sum(coalesce(cardinality(tids), 1)) FROM bt_page_items('rl_buckets_pkey', 1)});
}

$node->safe_psql('postgres', q{SELECT rl_take('hot', 'ada', 1, 1000)});	# the insert
is(pkey_entries(), '1', 'the insert made one primary-key entry');
take(50, 'primary key only');
my ($upd, $hot) = update_counts($updates);
is($upd, $updates, 'primary key only: every decision updated the row');
is($hot, $updates, 'primary key only: every update was HOT');
pkey_holds_every_version('primary key only');
is(pkey_entries(), '1', 'primary key only: the HOT updates added no primary-key entry');

# a summarizing index on tat
$node->safe_psql('postgres', 'CREATE INDEX rl_buckets_tat_brin ON rl_buckets USING brin (tat)');
take(20, 'with a BRIN index on tat');
my ($upd2, $hot2) = update_counts($updates);
is($upd2 - $upd, 20, 'with a BRIN index on tat: every decision updated the row');
if ($major >= 16)
{
	is($hot2 - $hot, 20, "PostgreSQL $major, with a BRIN index on tat: every update was HOT");
	is(pkey_entries(), '1',
		"PostgreSQL $major, with a BRIN index on tat: the HOT updates added no primary-key entry");
}
else
{
	is($hot2 - $hot, 0, "PostgreSQL $major, with a BRIN index on tat: no update was HOT");
}
pkey_holds_every_version('with a BRIN index on tat');
my $newest = $node->safe_psql('postgres', 'SELECT max(tat) FROM rl_buckets');
my $no_other_scan = 'SET enable_seqscan = off; SET enable_indexscan = off;';
my $brin_scan = qq{SELECT count(*) FROM rl_buckets WHERE tat >= '$newest'};
like($node->safe_psql('postgres', "$no_other_scan EXPLAIN (COSTS OFF) $brin_scan"),
	qr/Bitmap Index Scan on rl_buckets_tat_brin/, 'the check scans the BRIN index');
is($node->safe_psql('postgres', "$no_other_scan $brin_scan"), '1',
	'with a BRIN index on tat: the BRIN index finds the newest tat');
$node->safe_psql('postgres', 'DROP INDEX rl_buckets_tat_brin');

# an ordinary index on tat: no update can be HOT, every index gets entries
$node->safe_psql('postgres', 'CREATE INDEX rl_buckets_tat ON rl_buckets (tat)');
take(20, 'with a B-tree index on tat');
my ($upd3, $hot3) = update_counts($updates);
is($upd3 - $upd2, 20, 'with a B-tree index on tat: every decision updated the row');
is($hot3 - $hot2, 0, 'with a B-tree index on tat: no update was HOT');
pkey_holds_every_version('with a B-tree index on tat');
is($node->psql('postgres',
	q{SELECT bt_index_check('rl_buckets_tat'::regclass, heapallindexed => true)}),
	0, 'with a B-tree index on tat: amcheck finds every row version in it');

done_testing();
