# ratelimit.key_secret_file: the secret is read from a file only the server's
# user can read, takes precedence over ratelimit.key_secret, and never reaches
# the server log or pg_stat_statements (with every statement logged and
# tracked); a file replaced in place takes effect at a reload; a file others
# can read is refused, keeping the previous secret at a reload and failing
# every decision when the server starts with it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Digest::SHA qw(hmac_sha256_hex);

my $node = PostgreSQL::Test::Cluster->new('secretfile');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit, pg_stat_statements'
pg_stat_statements.track_utility = on
log_statement = 'all'
ratelimit.key_secret = 'the setting'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE EXTENSION pgcrypto;
	CREATE EXTENSION pg_stat_statements;
});

my $dir = PostgreSQL::Test::Utils::tempdir();
my $path = "$dir/key_secret";
my @secrets = map { sprintf('secret-%d-%08x', $_, int(rand(2**32))) } 1 .. 3;

# write_secret(SECRET, MODE): replace the file in place, as a rotation would
sub write_secret
{
	my ($secret, $mode) = @_;
	open(my $fh, '>', "$path.new") or die $!;
	print $fh "$secret\n";
	close($fh);
	chmod($mode, "$path.new") or die $!;
	rename("$path.new", $path) or die $!;
}

# stored_under(LIMITER, KEY, SECRET_SQL): whether the bucket of (limiter, key)
# is stored under HMAC-SHA-256 with the secret SECRET_SQL (bytea) computes
my $file_secret = qq{(SELECT substring(f FROM 1 FOR length(f) - 1)
					 FROM pg_read_binary_file('$path') AS f)};
sub stored_under
{
	my ($limiter, $key, $secret_sql) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM rl_buckets
		WHERE key = hmac(convert_to('$limiter', 'UTF8') || '\\x00'::bytea || convert_to('$key', 'UTF8'),
						 $secret_sql, 'sha256')});
}
sub take
{
	my ($limiter, $key) = @_;
	return $node->safe_psql('postgres', "SELECT allowed FROM rl_take('$limiter', '$key', 1.0 / 3600, 1)");
}

write_secret($secrets[0], 0600);
$node->safe_psql('postgres', "ALTER SYSTEM SET ratelimit.key_secret_file = '$path'");
$node->reload;
$node->poll_query_until('postgres', "SELECT current_setting('ratelimit.key_secret_file') = '$path'")
  or die 'reload did not apply';
is(take('login', 'ada'), 't', 'a decision under the file\'s secret');
is(stored_under('login', 'ada', $file_secret), '1',
	'the stored key is HMAC-SHA-256 with the file\'s content, its trailing newline dropped');
is(stored_under('login', 'ada', q{convert_to('the setting', 'UTF8')}), '0',
	'the file takes precedence over ratelimit.key_secret');

# rotation: the same path, a new content, a reload
write_secret($secrets[1], 0600);
$node->reload;
$node->poll_query_until('postgres', qq{
	SELECT (rl_take('rotated', 'k', 1.0 / 3600, 100)).allowed
	   AND EXISTS (SELECT FROM rl_buckets
				   WHERE key = hmac(convert_to('rotated', 'UTF8') || '\\x00'::bytea || convert_to('k', 'UTF8'),
									$file_secret, 'sha256'))})
  or die 'the new content did not apply';
is(take('login', 'ada'), 't', 'a new secret starts the budget afresh');

# a file others can read is refused at a reload: the previous secret stays
my $offset = -s $node->logfile;
write_secret($secrets[2], 0640);
$node->reload;
ok( $node->wait_for_log(qr/invalid value for parameter "ratelimit.key_secret_file"/, $offset),
	'a group-readable file is refused at a reload');
like(slurp_file($node->logfile, $offset), qr/accessible to other users than the server's \(mode 0640\)/,
	'the log says why');
is(take('refused', 'k'), 't', 'decisions go on');
# computed here: a statement holding the secret would be logged
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM rl_buckets WHERE key = '\\x"
		  . hmac_sha256_hex("refused\0k", $secrets[1]) . "'"),
	'1', 'under the previous secret');

# the same file when the server starts: no previous secret, so no decision
$node->restart;
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT rl_take('refused', 'k2', 1.0 / 3600, 1)});
like($err, qr/ratelimit.key_secret_file could not be used/,
	'at startup a refused file fails the decisions instead of keying with another secret');
chmod(0600, $path) or die $!;
$node->reload;
$node->poll_query_until('postgres', q{SELECT (rl_take('refused', 'k2', 1.0 / 3600, 1)).allowed})
  or die 'the fixed file did not apply';
is(stored_under('refused', 'k2', $file_secret), '1', 'once fixed and reloaded, decisions use it');

# back to the setting
$node->safe_psql('postgres', 'ALTER SYSTEM RESET ratelimit.key_secret_file');
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('ratelimit.key_secret_file') = ''})
  or die 'reload did not apply';
is(take('setting', 'k'), 't', 'without the file');
is(stored_under('setting', 'k', q{convert_to('the setting', 'UTF8')}), '1',
	'ratelimit.key_secret is used again');

# what the log and the statement statistics hold
my $log = slurp_file($node->logfile);
like($log, qr/parameter "ratelimit.key_secret_file" changed to "\Q$path\E"/,
	'a reload logs the path');
like($log, qr/ALTER SYSTEM SET ratelimit.key_secret_file/, 'the log holds every statement');
my $statements = $node->safe_psql('postgres', 'SELECT query FROM pg_stat_statements');
like($statements, qr/ALTER SYSTEM SET ratelimit.key_secret_file/,
	'pg_stat_statements tracks ALTER SYSTEM');
for my $i (0 .. $#secrets)
{
	unlike($log, qr/\Q$secrets[$i]\E/, 'secret ' . ($i + 1) . ' is not in the server log');
	unlike($statements, qr/\Q$secrets[$i]\E/, 'secret ' . ($i + 1) . ' is not in pg_stat_statements');
}

$node->stop;
done_testing();
