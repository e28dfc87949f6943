# Policies are data: a committed change reaches every connected session at
# its next call, an uncommitted one reaches none, and pg_dump keeps them.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('policies');
$node->init;
$node->append_conf('postgresql.conf', 'ratelimit.in_transaction = allow');
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies VALUES ('sign_in', 1.0 / 3600, 2);
});

# a session that has used, and so cached, the policy
my $app = $node->background_psql('postgres', on_error_stop => 0);
my $peek = q{SELECT remaining FROM rl_take('sign_in', 'ada', 0)};
is($app->query_safe($peek), '2', 'the connected session decides by the policy');
is($app->query_safe($peek), '2', 'again, from its cache');

# an uncommitted change applies nowhere else
my $admin = $node->background_psql('postgres');
$admin->query_safe(q{BEGIN; UPDATE rl_policies SET burst = 5 WHERE limiter = 'sign_in'});
is($app->query_safe($peek), '2', 'an uncommitted UPDATE does not apply in another session');
is($admin->query_safe($peek), '5', 'but applies in its own transaction');
is($node->safe_psql('postgres', $peek), '2', 'nor in a new session');
$admin->query_safe('ROLLBACK');
is($admin->query_safe($peek), '2', 'a rolled-back change is gone from its own session too');

# a committed change applies at the next call
$admin->query_safe(q{UPDATE rl_policies SET burst = 7 WHERE limiter = 'sign_in'});
is($app->query_safe($peek), '7', 'a committed UPDATE applies at the next call of a connected session');
$admin->query_safe(q{INSERT INTO rl_policies VALUES ('reset', 1.0 / 3600, 3)});
is($app->query_safe(q{SELECT remaining FROM rl_take('reset', 'ada', 0)}), '3',
	'an inserted policy too');
$admin->query_safe(q{DELETE FROM rl_policies WHERE limiter = 'reset'});
$app->query(q{SELECT rl_take('reset', 'ada', 0)});
like($app->{stderr}, qr/limiter "reset" has no policy/, 'a deleted policy is unknown at the next call');
$app->{stderr} = '';
$admin->query_safe(q{TRUNCATE rl_policies; INSERT INTO rl_policies VALUES ('sign_in', 1.0 / 3600, 4)});
is($app->query_safe($peek), '4', 'a truncated and refilled table too');

# the fill level carries over in cells
is($app->query_safe(q{SELECT remaining FROM rl_take('sign_in', 'bob', 2)}), '2',
	'two of four cells used');
$admin->query_safe(q{UPDATE rl_policies SET rate = 1.0 / 360, burst = 40 WHERE limiter = 'sign_in'});
is($app->query_safe(q{SELECT remaining FROM rl_take('sign_in', 'bob', 0)}), '38',
	'under a limit ten times larger, two of forty');
$admin->quit;
$app->quit;

# pg_dump keeps the policies; the buckets are not configuration
my $dump = PostgreSQL::Test::Utils::tempdir() . '/policies.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ],
	'pg_dump of a database with policies');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');
is($node->safe_psql('restored', 'SELECT limiter, rate * 360, burst, shadow FROM rl_policies'),
	'sign_in|1|40|f', 'the policies are restored');
is($node->safe_psql('restored', q{SELECT remaining FROM rl_take('sign_in', 'bob', 0)}), '40',
	'and decide; the buckets started afresh');

$node->stop;
done_testing();
