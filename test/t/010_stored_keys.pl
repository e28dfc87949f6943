# The stored key is SHA-256(limiter || 0x00 || key), or HMAC-SHA-256 under
# ratelimit.key_secret, in both stores, whatever the lengths (a key longer
# than a hash block, a secret longer than one) and the characters, and after
# the secret changes under a session that has hashed keys before.  The
# expected keys come from Perl's Digest::SHA and from pgcrypto, computed
# independently of the extension.  A bucket stored under the expected key is
# the one every deciding function finds: an exhausted one is denied, and
# rl_reset removes it.
use strict;
use warnings;
use Digest::SHA qw(sha256_hex hmac_sha256_hex);
use Encode qw(encode_utf8);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my @pairs = (
	[ 'auth_login', 'ada@example.com' ],
	[ "\x{fc}ber", "\x{65e5}\x{672c} \x{1f600}" ],
	[ 'l' x 70, 'k' x 300 ],
	[ 'ab', 'c' ],
	[ 'a', 'bc' ],
);
my @secrets = ('', 'first secret', "\x{e9}" . ('s' x 99), 'first secret');

sub sql_literal
{
	my ($text) = @_;
	$text =~ s/'/''/g;
	return "'$text'";
}

sub expected_key
{
	my ($limiter, $key, $secret) = @_;
	my $message = encode_utf8($limiter) . "\0" . encode_utf8($key);
	return $secret eq ''
	  ? sha256_hex($message)
	  : hmac_sha256_hex($message, encode_utf8($secret));
}

for my $store ('table', 'memory')
{
	my $node = PostgreSQL::Test::Cluster->new("keys_$store");
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = $store
ratelimit.in_transaction = allow
ratelimit.cleanup_interval = 0
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit; CREATE EXTENSION pgcrypto');
	# one session for every secret: what it keeps between calls must follow
	# the secret
	my $session = $node->background_psql('postgres');
	my $query = sub { return $session->query_safe(encode_utf8(shift)); };
	$query->('SET client_encoding = UTF8');

	for my $secret (@secrets)
	{
		my $shown = $secret eq '' ? 'no secret' : length($secret) . '-character secret';
		$node->safe_psql('postgres',
			encode_utf8('ALTER SYSTEM SET ratelimit.key_secret = ' . sql_literal($secret)));
		$node->reload;
		my $applied = 0;
		for (1 .. 100)
		{
			my $now = $query->(
				'SELECT current_setting(\'ratelimit.key_secret\') = ' . sql_literal($secret));
			$applied = $now eq 't' and last;
			usleep(100_000);
		}
		ok($applied, "$store store, $shown: the session has the secret");

		for my $pair (@pairs)
		{
			my ($limiter, $key) = @$pair;
			my ($l, $k) = (sql_literal($limiter), sql_literal($key));
			my $expected = expected_key($limiter, $key, $secret);
			my $message = "convert_to($l, 'UTF8') || '\\x00'::bytea || convert_to($k, 'UTF8')";
			my $pgcrypto = $secret eq ''
			  ? "digest($message, 'sha256')"
			  : "hmac($message, convert_to(" . sql_literal($secret) . ", 'UTF8'), 'sha256')";
			my $what = "$store store, $shown, limiter of " . length($limiter) . " characters";

			is($query->("SELECT encode($pgcrypto, 'hex')"),
				$expected, "$what: pgcrypto and Digest::SHA agree");

			# an exhausted bucket under the expected key, live for an hour
			$query->(qq{
				DELETE FROM rl_buckets;
				SELECT rl_reset($l, $k);
				INSERT INTO rl_buckets VALUES ('\\x$expected', now() + interval '1 hour', 1000000)});
			is($query->("SELECT allowed FROM rl_take($l, $k, 1, 1)"),
				'f', "$what: the bucket under the expected key decides");
			is($query->("SELECT rl_reset($l, $k)"),
				't', "$what: rl_reset finds it");
			is($query->('SELECT count(*) FROM rl_buckets'),
				'0', "$what: and removes it");
			next unless $store eq 'table';
			$query->("SELECT rl_take($l, $k, 1, 1)");
			is($query->('SELECT encode(key, \'hex\') FROM rl_buckets'),
				$expected, "$what: rl_take stores the expected key");
		}
	}
	$session->quit;
	$node->stop;
}

done_testing();
