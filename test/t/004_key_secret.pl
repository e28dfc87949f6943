# ratelimit.key_secret: HMAC-SHA-256 keys for the whole cluster, hidden from
# other roles when the library is preloaded, and a new secret starts every
# budget afresh.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('secret');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.key_secret = 'first secret'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE EXTENSION pgcrypto;
	CREATE ROLE app LOGIN;
	GRANT USAGE ON SCHEMA public TO app;
});

sub stored_as
{
	my ($hash) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM rl_buckets WHERE key = $hash");
}
my $pair = q{convert_to('auth_login', 'UTF8') || '\x00'::bytea || convert_to('ada@example.com', 'UTF8')};
my $take = q{SELECT allowed FROM rl_take('auth_login', 'ada@example.com', 1.0 / 3600, 1)};

is($node->safe_psql('postgres', $take, connstr => $node->connstr('postgres') . ' user=app'),
	't', 'the application role decides');
is(stored_as("hmac($pair, convert_to('first secret', 'UTF8'), 'sha256')"),
	'1', 'the stored key is HMAC-SHA-256(secret, limiter || 0x00 || key)');
is(stored_as("sha256($pair)"), '0', 'not the plain SHA-256');

my ($ret, $out, $err) = $node->psql('postgres', 'SHOW ratelimit.key_secret',
	connstr => $node->connstr('postgres') . ' user=app');
isnt($ret, 0, 'another role cannot SHOW the secret');
# 15: "must be superuser or have privileges of pg_read_all_settings";
# 16 and later: "permission denied to examine"
like($err, qr/must be superuser|permission denied to examine/, 'it is told why');
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT count(*) FROM pg_settings WHERE name = 'ratelimit.key_secret' AND setting LIKE '%secret%'},
	connstr => $node->connstr('postgres') . ' user=app');
is($out, '0', 'nor read it from pg_settings');
$node->safe_psql('postgres', 'GRANT pg_read_all_settings TO app');
is( $node->safe_psql('postgres', q{SELECT current_setting('ratelimit.key_secret')},
		connstr => $node->connstr('postgres') . ' user=app'),
	'(hidden)', 'a member of pg_read_all_settings sees it masked');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_settings WHERE name = 'ratelimit.key_secret'},
		connstr => $node->connstr('postgres') . ' user=app'),
	'0', 'and pg_settings, whose reset_val no hook masks, does not list it');
$node->safe_psql('postgres', 'REVOKE pg_read_all_settings FROM app');
is($node->safe_psql('postgres', 'SHOW ratelimit.key_secret'),
	'first secret', 'a superuser sees the secret');
($ret, $out, $err) = $node->psql('postgres', q{SET ratelimit.key_secret = 'mine'},
	connstr => $node->connstr('postgres') . ' user=app');
like($err, qr/cannot be changed now/, 'nor set it in a session');

is($node->safe_psql('postgres', $take), 'f', 'the budget is spent under the first secret');
$node->safe_psql('postgres', q{ALTER SYSTEM SET ratelimit.key_secret = 'second secret'});
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT current_setting('ratelimit.key_secret') = 'second secret'})
  or die 'reload did not apply';
is($node->safe_psql('postgres', $take), 't', 'a new secret starts the budget afresh');
is(stored_as("hmac($pair, convert_to('second secret', 'UTF8'), 'sha256')"),
	'1', 'keyed with the new secret');

$node->safe_psql('postgres', q{ALTER SYSTEM SET ratelimit.key_secret = ''});
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('ratelimit.key_secret') = ''})
  or die 'reload did not apply';
is($node->safe_psql('postgres', $take), 't', 'an empty secret means plain keys');
is(stored_as("sha256($pair)"), '1', 'stored as SHA-256 again');

$node->stop;
done_testing();
