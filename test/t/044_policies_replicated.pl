# Policies changed by logical replication reach the policy cache of every
# session on the subscriber, as a local change does: the apply worker fires
# row triggers only (and TRUNCATE's), never the statement triggers of an
# INSERT, UPDATE or DELETE.  Two clusters, a real publication and
# subscription of rl_policies.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pub = PostgreSQL::Test::Cluster->new('policies_publisher');
$pub->init(allows_streaming => 'logical');
$pub->start;
my $sub = PostgreSQL::Test::Cluster->new('policies_subscriber');
$sub->init;
$sub->append_conf('postgresql.conf', 'ratelimit.in_transaction = allow');
$sub->start;

$pub->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies VALUES ('sign_in', 1.0 / 3600, 2);
	CREATE PUBLICATION limits FOR TABLE rl_policies;
});
$sub->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $connstr = $pub->connstr . ' dbname=postgres';
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION limits CONNECTION '$connstr' PUBLICATION limits");
$sub->wait_for_subscription_sync($pub, 'limits');

# a session on the subscriber that has cached the policy, and the absence
# of one for "export"
my $app = $sub->background_psql('postgres', on_error_stop => 0);
my $peek = q{SELECT remaining FROM rl_take('sign_in', 'ada', 0)};
is($app->query_safe($peek), '2', 'the subscriber decides by the copied policy');
is($app->query_safe(q{SELECT allowed FROM rl_take('export', 'ada', 1, 5)}), 't',
	'and explicitly for a limiter without one');

# replicated changes apply at the session's next call
$pub->safe_psql('postgres', q{UPDATE rl_policies SET burst = 7 WHERE limiter = 'sign_in'});
$pub->wait_for_catchup('limits');
is($app->query_safe($peek), '7', 'a replicated UPDATE applies in a connected session');

$pub->safe_psql('postgres', q{INSERT INTO rl_policies VALUES ('export', 1.0 / 3600, 3)});
$pub->wait_for_catchup('limits');
my ($out, $err) = ('', '');
$app->query(q{SELECT rl_take('export', 'ada', 1, 5)});
like($app->{stderr}, qr/limiter "export" has a policy/,
	'a replicated INSERT binds the limiter: its explicit form is refused');
$app->{stderr} = '';
is($app->query_safe(q{SELECT remaining FROM rl_take('export', 'ada', 0)}), '2',
	'and it decides by the new policy (burst 3, the explicit call\'s cell carried over)');

$pub->safe_psql('postgres', q{DELETE FROM rl_policies WHERE limiter = 'export'});
$pub->wait_for_catchup('limits');
$app->query(q{SELECT rl_take('export', 'ada', 0)});
like($app->{stderr}, qr/limiter "export" has no policy/, 'a replicated DELETE applies');
$app->{stderr} = '';

$pub->safe_psql('postgres', 'TRUNCATE rl_policies');
$pub->wait_for_catchup('limits');
$app->query($peek);
like($app->{stderr}, qr/limiter "sign_in" has no policy/, 'a replicated TRUNCATE applies');
$app->{stderr} = '';

$app->quit;
$sub->safe_psql('postgres', 'DROP SUBSCRIPTION limits');
$sub->stop;
$pub->stop;
done_testing();
