# ratelimit_proxy upgraded from 1.1 has exactly the objects of a fresh
# install of the current version (test/t/006_upgrade.pl does the same for
# ratelimit), and a default grant opens none of the functions the scripts
# keep for the owner.
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
$node->safe_psql('postgres', 'CREATE ROLE app_in_default_acl');
for my $db ('fresh', 'upgraded_1_1')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
		ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO app_in_default_acl;
		ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app_in_default_acl;
	});
}
$node->safe_psql('fresh', 'CREATE EXTENSION ratelimit_proxy CASCADE');
$node->safe_psql('upgraded_1_1', q{CREATE EXTENSION ratelimit_proxy VERSION '1.1' CASCADE});
$node->safe_psql('upgraded_1_1', 'ALTER EXTENSION ratelimit_proxy UPDATE');
my $version = q{SELECT extversion FROM pg_extension WHERE extname = 'ratelimit_proxy'};
is($node->safe_psql('upgraded_1_1', $version), $node->safe_psql('fresh', $version),
	'ALTER EXTENSION ratelimit_proxy UPDATE from 1.1 reaches the default version');
isnt($node->safe_psql('fresh', $version), '1.1', 'which is newer than 1.1');

my $describe = describe_extension('ratelimit_proxy');
my $fresh = $node->safe_psql('fresh', $describe);
like($fresh, qr/^function rl_take_all\(text\[\],text\[\],integer\[\]\)/m,
	'the description lists the functions');
like($fresh, qr/^relation rl_policies kind v /m, 'and the view rl_policies');
is($node->safe_psql('upgraded_1_1', $describe), $fresh,
	'an upgraded 1.1 has the objects of a fresh install, signatures, volatility, '
	  . 'security, grants, types and views alike');

for my $db ('fresh', 'upgraded_1_1')
{
	is( $node->safe_psql($db, q{
			SELECT string_agg(p.proname, ',' ORDER BY p.proname)
			FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
			 AND d.deptype = 'e'
			 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ratelimit_proxy')
			WHERE NOT has_function_privilege('public', p.oid, 'EXECUTE')
			  AND has_function_privilege('app_in_default_acl', p.oid, 'EXECUTE')}),
		'', "$db: a default grant opens none of the functions revoked from PUBLIC");
	is($node->safe_psql($db, q{SELECT has_table_privilege('app_in_default_acl', 'rl_policies', 'INSERT')}),
		'f', "$db: nor a write on rl_policies");
}

$node->stop;
done_testing();
