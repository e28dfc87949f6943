# ratelimit_proxy upgraded from each released version (1.1, 1.2) has exactly
# the objects of a fresh install of the current version (test/t/006_upgrade.pl
# does the same for ratelimit), an administrator's privileges on the objects
# that the upgrade makes again are kept, a default grant opens none of the
# functions the scripts keep for the owner, and the proxy's rl_policies has
# the columns of a shard's.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use ExtensionObjects;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('proxy_upgrade');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE ROLE app_in_default_acl; CREATE ROLE reader; CREATE ROLE stranger');
my @released = ('1.1', '1.2');
my @upgraded = map { my $v = $_; $v =~ s/\./_/; "upgraded_$v" } @released;
for my $db ('fresh', @upgraded, 'administered')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
		ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO app_in_default_acl;
		ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app_in_default_acl;
	});
}
$node->safe_psql('fresh', 'CREATE EXTENSION ratelimit_proxy CASCADE');
my $version = q{SELECT extversion FROM pg_extension WHERE extname = 'ratelimit_proxy'};
my $default = $node->safe_psql('fresh', $version);
ok(!grep({ $_ eq $default } @released), "the default version $default is newer than every released one");
for my $i (0 .. $#released)
{
	$node->safe_psql($upgraded[$i], qq{CREATE EXTENSION ratelimit_proxy VERSION '$released[$i]' CASCADE});
	$node->safe_psql($upgraded[$i], 'ALTER EXTENSION ratelimit_proxy UPDATE');
	is($node->safe_psql($upgraded[$i], $version), $default,
		"ALTER EXTENSION ratelimit_proxy UPDATE from $released[$i] reaches the default version");
}

my $describe = describe_extension('ratelimit_proxy');
my $fresh = $node->safe_psql('fresh', $describe);
like($fresh, qr/^function rl_take_all\(text\[\],text\[\],integer\[\]\)/m,
	'the description lists the functions');
like($fresh, qr/^function rl_take_at\(text,text,integer,timestamp with time zone\) .* lang plproxy /m,
	'the policy form of rl_take_at (1.3), proxied');
like($fresh, qr/^relation rl_policies kind v .* columns \(limiter text, rate double precision, burst integer, shadow boolean, lockout interval, lockout_growth double precision, lockout_max interval, durable boolean\)/m,
	'and the view rl_policies with the lockout and durable columns');
for my $i (0 .. $#released)
{
	is($node->safe_psql($upgraded[$i], $describe), $fresh,
		"an upgraded $released[$i] has the objects of a fresh install, signatures, volatility, "
		  . 'security, grants, types and views alike');
}

for my $db ('fresh', @upgraded)
{
	is( $node->safe_psql($db, q{
			SELECT string_agg(p.proname, ',' ORDER BY p.proname)
			FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
			 AND d.deptype = 'e'
			 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ratelimit_proxy')
			WHERE NOT has_function_privilege('public', p.oid, 'EXECUTE')
			  AND has_function_privilege('app_in_default_acl', p.oid, 'EXECUTE')}),
		'', "$db: a default grant opens none of the functions revoked from PUBLIC");
	is( $node->safe_psql($db, q{
			SELECT string_agg(m, ',' ORDER BY m) FROM unnest(ARRAY['INSERT', 'UPDATE', 'DELETE',
				'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS m
			WHERE has_table_privilege('app_in_default_acl', 'rl_policies', m)}),
		'', "$db: nor any write on rl_policies");
	is( $node->safe_psql($db, q{
			SELECT has_function_privilege('stranger', 'rl_take_at(text, text, integer, timestamptz)', 'EXECUTE'),
				has_table_privilege('stranger', 'rl_policies', 'SELECT')}),
		'f|t', "$db: the policy form of rl_take_at is revoked from PUBLIC; every role reads rl_policies");
}

# An administrator who let only some roles read the policies keeps it so:
# the view and its functions are made again with the privileges they had.
$node->safe_psql('administered', q{
	CREATE EXTENSION ratelimit_proxy VERSION '1.2' CASCADE;
	REVOKE SELECT ON rl_policies FROM PUBLIC;
	GRANT SELECT ON rl_policies TO reader WITH GRANT OPTION;
	REVOKE EXECUTE ON FUNCTION rl_proxy_policies() FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION rl_proxy_policies() TO reader;
	ALTER EXTENSION ratelimit_proxy UPDATE;
});
my $rights = q{
	SELECT string_agg(format('%s %s', r, p), ', ' ORDER BY r, p)
	FROM unnest(ARRAY['reader', 'stranger', 'app_in_default_acl']) AS r,
		unnest(ARRAY['SELECT', 'SELECT WITH GRANT OPTION', 'INSERT', 'DELETE']) AS p
	WHERE has_table_privilege(r, 'rl_policies', p)};
is($node->safe_psql('administered', $rights), 'reader SELECT, reader SELECT WITH GRANT OPTION',
	'an administrator\'s grant and revoke on rl_policies are kept by the upgrade');
is( $node->safe_psql('administered', q{
		SELECT string_agg(r, ', ' ORDER BY r)
		FROM unnest(ARRAY['reader', 'stranger', 'app_in_default_acl']) AS r
		WHERE has_function_privilege(r, 'rl_proxy_policies()', 'EXECUTE')}),
	'reader', 'and those on rl_proxy_policies()');
is($node->safe_psql('fresh', $rights), 'app_in_default_acl SELECT, reader SELECT, stranger SELECT',
	'(a fresh install: every role reads rl_policies, none may grant it)');

# The proxy's rl_policies has the columns of a shard's, in their order.
$node->safe_psql('postgres', 'CREATE DATABASE shard');
$node->safe_psql('shard', 'CREATE EXTENSION ratelimit');
my $columns = q{SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
	FROM pg_attribute WHERE attrelid = 'rl_policies'::regclass AND attnum > 0 AND NOT attisdropped};
is($node->safe_psql('fresh', $columns), $node->safe_psql('shard', $columns),
	'the proxy\'s rl_policies has the columns of ratelimit\'s, names, types and order');

$node->stop;
done_testing();
