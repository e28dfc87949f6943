# Upgrading from each released version (1.0, 1.1, 1.2): an upgraded database has
# exactly the objects of a fresh install of the current version, keeps every
# bucket, and goes on deciding from where it was.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use ExtensionObjects;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->start;

# A default grant must not open what the scripts revoke, on either path.
$node->safe_psql('postgres', 'CREATE ROLE app_in_default_acl');
my @released = ('1.0', '1.1', '1.2');
my @upgraded = map { my $v = $_; $v =~ s/\./_/; "upgraded_$v" } @released;
for my $db ('fresh', @upgraded)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
		ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO app_in_default_acl;
		ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app_in_default_acl;
	});
}
$node->safe_psql('fresh', 'CREATE EXTENSION ratelimit');
my $default = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'ratelimit'});
ok(!grep({ $_ eq $default } @released), "the default version $default is newer than every released one");

my $take = q{SELECT allowed, remaining FROM rl_take_at('login', 'ada', 1.0 / 60, 3, 1, '2030-01-01 00:00:00+00')};
my %buckets_before;
for my $i (0 .. $#released)
{
	my ($version, $db) = ($released[$i], $upgraded[$i]);
	$node->safe_psql($db, qq{CREATE EXTENSION ratelimit VERSION '$version'});
	is($node->safe_psql($db, $take), 't|2', "a decision at $version");
	is($node->safe_psql($db, $take), 't|1', 'a second one');
	$buckets_before{$db} = $node->safe_psql($db, 'SELECT key, tat, interval_us FROM rl_buckets ORDER BY key');
	$node->safe_psql($db, 'ALTER EXTENSION ratelimit UPDATE');
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'}),
		$default, "ALTER EXTENSION ... UPDATE from $version reaches the default version");
	is($node->safe_psql($db, 'SELECT key, tat, interval_us FROM rl_buckets ORDER BY key'),
		$buckets_before{$db}, 'every bucket is kept');
	is($node->safe_psql($db, 'SELECT count(*) FROM rl_buckets WHERE lock_until IS NOT NULL OR lock_us IS NOT NULL'),
		0, 'none of them locked');
	is($node->safe_psql($db, $take), 't|0', 'and decisions go on from where they were');
	is($node->safe_psql($db, $take), 'f|0', 'until the budget is spent');
}

my $describe = describe_extension('ratelimit');
my $fresh = $node->safe_psql('fresh', $describe);

like($fresh, qr/^function rl_take\(text,text,double precision,integer,integer\)/m,
	'the description lists the functions');
like($fresh, qr/^relation rl_buckets kind r persistence u/m, 'and the tables');
like($fresh, qr/^relation rl_policies kind r persistence p .* dumped true$/m,
	'rl_policies is logged and kept by pg_dump');
for my $i (0 .. $#released)
{
	is($node->safe_psql($upgraded[$i], $describe), $fresh,
		"an upgraded $released[$i] has the objects of a fresh install, signatures, "
		  . 'volatility, strictness, grants, types, columns and constraints alike');
}

# Nothing the scripts revoke is reachable through the default grant.
for my $db ('fresh', @upgraded)
{
	is( $node->safe_psql($db, q{
			SELECT string_agg(p.proname, ',' ORDER BY p.proname)
			FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
			 AND d.deptype = 'e' AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ratelimit')
			WHERE p.proname IN ('rl_take_at', 'rl_reset', 'rl_cleanup', 'rl_refund')
			  AND has_function_privilege('app_in_default_acl', p.oid, 'EXECUTE')}),
		'', "$db: a default grant opens none of rl_take_at, rl_reset, rl_cleanup, rl_refund");
	is( $node->safe_psql($db, q{
			SELECT string_agg(m, ',' ORDER BY m) FROM unnest(ARRAY['INSERT', 'UPDATE', 'DELETE',
				'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS m
			WHERE has_table_privilege('app_in_default_acl', 'rl_policies', m)}),
		'', "$db: nor any write on rl_policies");
	is($node->safe_psql($db, q{SELECT has_table_privilege('app_in_default_acl', 'rl_policies', 'SELECT')}),
		't', "$db: which every role reads");
}

$node->stop;
done_testing();
