# rl_stats counts every decision of every deciding function by limiter and
# outcome in its own database, past ROLLBACK, with names past
# ratelimit.stats_limiters under NULL; rl_stats_reset() is not for PUBLIC;
# rl_cleanup_runs shows the worker's last run; the names of a dropped
# database are freed for the next ones; without preloading, reading the
# counts is an error with a hint and decisions go on.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('stats');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.stats_limiters = 6
ratelimit.cleanup_interval = '1s'
ratelimit.in_transaction = allow
});
$node->start;

sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }
sub stats
{
	my ($db) = @_;
	return query($db, q{
		SELECT coalesce(limiter, 'NULL'), allowed, denied, shadow_denied
		FROM rl_stats ORDER BY limiter NULLS LAST});
}

is(query('postgres', 'SHOW ratelimit.stats_limiters'), '6', 'the bound from postgresql.conf');
query('postgres', 'CREATE DATABASE db1');
query('postgres', 'CREATE DATABASE db2');
query($_, 'CREATE EXTENSION ratelimit') for qw(db1 db2);
is(stats('db1'), '', 'no decision, no row');

# rl_take with rate and burst: two allowed, a denial, a peek (not counted:
# it decides nothing)
query('db1', q{
	SELECT rl_take('api', 'k', 1.0 / 3600, 2, 1) FROM generate_series(1, 3);
	SELECT rl_take('api', 'k', 1.0 / 3600, 2, 0);
	SELECT rl_take_at('at', 'k', 1, 1, 1, '2030-01-01');
	SELECT rl_take_at('at', 'k', 1, 1, 1, '2030-01-01');
	INSERT INTO rl_policies VALUES ('shadowed', 1.0 / 3600, 1, true);
	SELECT rl_take('shadowed', 'k', 1) FROM generate_series(1, 3);
	SELECT rl_take('shadowed', 'k', 0);
});
is(stats('db1'), join("\n", 'api|2|1|0', 'at|1|1|0', 'shadowed|1|0|2'),
	'rl_take (a peek is not counted), rl_take_at and a shadow policy');

# rl_take_all: each limiter by its own verdict
query('db1', q{
	SELECT rl_take_all(ARRAY['all_a', 'all_b'], ARRAY['k', 'k'],
					   ARRAY[1000, 1.0 / 3600], ARRAY[10, 1])
	FROM generate_series(1, 2);
	SELECT rl_take_all(ARRAY['all_a', 'all_b'], ARRAY['k', 'k'],
					   ARRAY[1000, 1.0 / 3600], ARRAY[10, 1], ARRAY[0, 0]);
});
is(query('db1', q{SELECT string_agg(limiter || '|' || allowed || '|' || denied, ',' ORDER BY limiter)
	FROM rl_stats WHERE limiter LIKE 'all_%'}),
	'all_a|2|0,all_b|1|1', 'rl_take_all counts each of its limiters, its peeks not');

# a rolled-back decision was still made
query('db1', q{BEGIN; SELECT rl_take('api', 'other', 1, 1, 1); ROLLBACK;});
is(query('db1', q{SELECT allowed FROM rl_stats WHERE limiter = 'api'}), '3',
	'counts survive ROLLBACK');

# per database: db2 sees none of it, and its own name
query('db2', q{SELECT rl_take('db2only', 'k', 1, 1, 1)});
is(stats('db2'), 'db2only|1|0|0', 'another database sees only its own');

# six names are taken: the next ones are counted under NULL
query('db1', q{
	SELECT rl_take('past1', 'k', 1, 5, 1);
	SELECT rl_take('past2', 'k', 1, 5, 1);
	SELECT rl_take('past2', 'k', 1.0 / 3600, 1, 5);
});
is(query('db1', q{SELECT allowed || '|' || denied FROM rl_stats WHERE limiter IS NULL}),
	'2|1', 'names past ratelimit.stats_limiters are counted under NULL');
is(query('db1', q{SELECT count(*) FROM rl_stats WHERE limiter LIKE 'past%'}), '0',
	'and not under their names');
is(query('db1', q{SELECT allowed FROM rl_stats WHERE limiter = 'api'}), '3',
	'a name already counted is still counted');

# privileges
query('db1', 'CREATE ROLE app LOGIN');
is(query('db1', q{SET ROLE app; SELECT count(*) > 0 FROM rl_stats}), 't',
	'any role reads rl_stats');
my ($rc, $out, $err) = $node->psql('db1', 'SET ROLE app; SELECT rl_stats_reset()');
like($err, qr/permission denied for function rl_stats_reset/, 'rl_stats_reset() is revoked from PUBLIC');
is(query('db1', q{SELECT has_function_privilege('public', 'rl_stats_reset()', 'EXECUTE')}),
	'f', 'PUBLIC has no EXECUTE on rl_stats_reset()');

# a reset forgets this database's counts and names, not another's
my $before = query('db1', 'SELECT now()');
query('db1', 'SELECT rl_stats_reset()');
is(stats('db1'), 'NULL|0|0|0', 'after a reset only a zero NULL row is left');
is(query('db1', qq{SELECT bool_and(since >= '$before') FROM rl_stats}), 't',
	'since is the reset');
is(stats('db2'), 'db2only|1|0|0', 'the other database keeps its counts');
query('db1', q{SELECT rl_take('past1', 'k', 1, 5, 1)});
is(query('db1', q{SELECT allowed FROM rl_stats WHERE limiter = 'past1'}), '1',
	'the freed names are counted under their names again');
is(query('db1', qq{SELECT bool_and(since >= '$before') FROM rl_stats}), 't',
	'since of a name counted after the reset');

# the cleanup worker's last run in each database
query('db1', q{
	INSERT INTO rl_buckets
	SELECT sha256(convert_to('old ' || i, 'UTF8')), now() - interval '1 hour', 1000000
	FROM generate_series(1, 5) AS i;
});
# the worker runs every second: a minute is plenty
my $seen = 'f';
for (1 .. 120)
{
	$seen = query('db2', q{
		SELECT count(*) = 1 AND bool_and(deleted >= 5 AND finished >= started)
		FROM rl_cleanup_runs() WHERE database = 'db1'});
	last if $seen eq 't';
	usleep(500_000);
}
is($seen, 't', 'rl_cleanup_runs shows the last run in db1, from any database');
is(query('db2', q{SELECT count(*) FROM rl_cleanup_runs() WHERE database = 'db2'}), '1',
	'and in db2, where it deleted nothing');

# a session that has counted a name keeps counting it exactly across
# another session's reset: what it kept of the entry is not used again
my $counter = $node->background_psql('db1');
$counter->query_safe(q{SELECT rl_take('kept', 'k', 1000, 1000, 1)}) for 1 .. 2;
is(query('db1', q{SELECT allowed FROM rl_stats WHERE limiter = 'kept'}), '2',
	'a session counts a name');
query('db1', 'SELECT rl_stats_reset()');
$counter->query_safe(q{SELECT rl_take('kept', 'k', 1000, 1000, 1)});
is(stats('db1'), join("\n", 'kept|1|0|0', 'NULL|0|0|0'),
	'after another session reset the counts, its next decision counts under its name, once');
$counter->quit;

# a dropped database's names are freed: a new database counts under its own
# names, not NULL, once the table is full of the dropped one's
query('postgres', 'CREATE DATABASE db3');
query('db3', 'CREATE EXTENSION ratelimit');
query('db3', q{SELECT rl_take('db3_' || i, 'k', 1, 5, 1) FROM generate_series(1, 6) AS i});
is(query('db3', q{SELECT count(*) FROM rl_stats WHERE limiter IS NULL}), '1',
	'the third database fills the names');
query('postgres', 'DROP DATABASE db3');
query('postgres', 'CREATE DATABASE db4');
query('db4', 'CREATE EXTENSION ratelimit');
# a full table looks for dropped databases at most once a second
sleep 2;
query('db4', q{SELECT rl_take('fresh', 'k', 1, 5, 1)});
is(stats('db4'), 'fresh|1|0|0', 'a database created after a drop counts under its own name');

$node->stop;

# with room for two names, a dropped database that counted two names (and
# so never counted under NULL) gives both back: a new database's first name
# is counted under its own name
my $few = PostgreSQL::Test::Cluster->new('two_names');
$few->init;
$few->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.stats_limiters = 2
});
$few->start;
$few->safe_psql('postgres', 'CREATE DATABASE gone');
$few->safe_psql('gone', q{
	CREATE EXTENSION ratelimit;
	SELECT rl_take('a', 'k', 1, 5, 1), rl_take('b', 'k', 1, 5, 1);
});
is($few->safe_psql('gone', q{SELECT string_agg(coalesce(limiter, 'NULL'), ',' ORDER BY limiter) FROM rl_stats}),
	'a,b', 'a database counts two names under their own names: the table is full');
$few->safe_psql('postgres', 'DROP DATABASE gone');
$few->safe_psql('postgres', 'CREATE DATABASE fresh');
$few->safe_psql('fresh', q{CREATE EXTENSION ratelimit; SELECT rl_take('c', 'k', 1, 5, 1)});
is($few->safe_psql('fresh', q{SELECT coalesce(limiter, 'NULL') || '|' || allowed FROM rl_stats}),
	'c|1', 'after it was dropped, a new database counts under its own name, not NULL');
$few->stop;

# without preloading: decisions go on, reading the counts is an error
my $plain = PostgreSQL::Test::Cluster->new('no_preload');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
is($plain->safe_psql('postgres', q{SELECT allowed FROM rl_take('api', 'k', 1, 1, 1)}), 't',
	'rl_take works without preloading');
is($plain->safe_psql('postgres', q{SELECT allowed FROM rl_take_all(ARRAY['a'], ARRAY['k'], ARRAY[1], ARRAY[1])}),
	't', 'rl_take_all too');
for my $sql ('SELECT * FROM rl_stats', 'SELECT rl_stats_reset()', 'SELECT * FROM rl_cleanup_runs()')
{
	($rc, $out, $err) = $plain->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($err, qr/55000: ratelimit statistics need ratelimit in shared_preload_libraries.*HINT:  Add ratelimit to shared_preload_libraries and restart/s,
		"$sql without preloading: an error with a hint");
}
$plain->stop;

done_testing();
