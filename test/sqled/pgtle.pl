# The pg_tle package (managed/build-pgtle) installs the objects of the plain
# install.  pg_tle is not installed here: in a fresh database, a stand-in
# pgtle.install_extension runs the script it is given as CREATE EXTENSION
# would (\echo lines blanked, @extschema@ replaced by the schema, which is
# first on search_path), and the objects it leaves in the schema, with their
# attributes and grants, are those psql -f leaves in another database.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib "$ENV{RL_SRC}/test/t";
use ExtensionObjects;

my $src = $ENV{RL_SRC};
my $node = PostgreSQL::Test::Cluster->new('sqled_pgtle');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE rl_sql_owner LOGIN;
	CREATE DATABASE plain;
	CREATE DATABASE tle;
});
for my $db ('plain', 'tle')
{
	$node->safe_psql($db, 'GRANT CREATE ON SCHEMA public TO rl_sql_owner');
}
$node->safe_psql('tle', q{
	CREATE SCHEMA pgtle;
	CREATE TABLE pgtle.registered (name text, fromvers text, version text);
	GRANT USAGE ON SCHEMA pgtle TO PUBLIC;
	GRANT INSERT ON pgtle.registered TO PUBLIC;
	CREATE FUNCTION pgtle.install_extension(name text, version text, description text, ext text,
											requires text[] DEFAULT NULL)
	RETURNS text LANGUAGE plpgsql AS $$
	DECLARE
		schema text := current_schema();
		caller_path text := current_setting('search_path');
	BEGIN
		INSERT INTO pgtle.registered VALUES (name, NULL, version);
		PERFORM set_config('search_path', quote_ident(schema) || ', pgtle', true);
		EXECUTE replace(regexp_replace(ext, '^\\\\echo.*$', '', 'ng'), '@extschema@', quote_ident(schema));
		PERFORM set_config('search_path', caller_path, true);
		RETURN 'OK';
	END
	$$;
	-- the database is at the newest version already: a path is registered
	CREATE FUNCTION pgtle.install_update_path(name text, fromvers text, tovers text, ext text)
	RETURNS text LANGUAGE sql AS $$
		INSERT INTO pgtle.registered VALUES (name, fromvers, tovers) RETURNING 'OK'
	$$;
});

my $package = PostgreSQL::Test::Utils::tempdir() . '/ratelimit_sql-pgtle.sql';
command_ok([ 'sh', '-c', "'$src/managed/build-pgtle' >'$package'" ], 'managed/build-pgtle writes the package');
unlike(slurp_file($package), qr/^\\(?!echo)/m, 'with no psql command in it');

sub install
{
	my ($db, $file, $name) = @_;
	$node->command_ok(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db),
		  '-U', 'rl_sql_owner', '-1', '-f', $file ], $name);
}
install('plain', "$src/managed/ratelimit_sql--1.3.sql", 'the plain install runs');
install('tle', $package, 'the package installs by its pgtle.install_extension');

my $version = $node->safe_psql('plain', 'SELECT rl_sql_version()');
is($node->safe_psql('tle', q{SELECT name, version FROM pgtle.registered WHERE fromvers IS NULL}),
	"ratelimit_sql|$version", 'as ratelimit_sql, at the version rl_sql_version() answers');

my $describe = describe_schema('public');
my $plain = $node->safe_psql('plain', $describe);
like($plain, qr/^function rl_take\(text,text,double precision,integer,integer\) .* secdef t /m,
	'the description lists the functions');
like($plain, qr/^relation rl_buckets kind r persistence u acl \{rl_sql_owner=/m, 'and the tables with their grants');
is($node->safe_psql('tle', $describe), $plain,
	'the package leaves the objects of the plain install: functions, types, tables, views, '
	  . 'triggers and grants alike');
is($node->safe_psql('tle', q{SELECT allowed FROM rl_take('signup', 'ada', 1, 1)}), 't',
	'and decides');

$node->stop;
done_testing();
