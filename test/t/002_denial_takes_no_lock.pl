# A request denied on its first read writes nothing and takes no row lock: it
# does not wait for a lock another session holds on the bucket, and the row's
# xmin and xmax do not change.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('nolock');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	SELECT rl_take('login', 'ada', 1.0 / 3600, 2, 2);
});

my $row = q{SELECT xmin, xmax, ctid FROM rl_buckets
	WHERE key = sha256(convert_to('login', 'UTF8') || '\x00'::bytea || convert_to('ada', 'UTF8'))};
my $take = q{SELECT allowed FROM rl_take('login', 'ada', 1.0 / 3600, 2)};

my $idle = $node->safe_psql('postgres', $row);
is($node->safe_psql('postgres', $take), 'f', 'the spent key is denied');
is($node->safe_psql('postgres', $row), $idle, 'the denial left xmin, xmax and ctid as they were');

# another session holds the row lock
my $holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN; $row FOR UPDATE");
my $locked = $node->safe_psql('postgres', $row);

my ($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '2s'; $take");
is($ret, 0, 'a denial does not wait for the lock another session holds');
is($out, 'f', 'and is a denial');
is($node->safe_psql('postgres', $row), $locked, 'xmin and xmax are still the holder\'s');

# rl_take_all denied on its first reads: no wait, no write, no lock, not even
# on the bucket of the other request, which would be allowed alone
my $take_all = q{SELECT allowed FROM rl_take_all(ARRAY['login', 'other'], ARRAY['ada', 'ada'],
	ARRAY[1.0 / 3600, 1.0 / 3600], ARRAY[2, 2])};
($ret, $out, $err) = $node->psql('postgres', "SET lock_timeout = '2s'; $take_all");
is($ret, 0, 'a denied rl_take_all does not wait for the lock another session holds');
is($out, 'f', 'and is a denial');
is($node->safe_psql('postgres', $row), $locked, 'the locked row is as it was');
is($node->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'), '1',
	'and the other request wrote nothing');
($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '200ms'; SELECT allowed FROM rl_take_all(ARRAY['login', 'other'],"
	  . " ARRAY['ada', 'ada'], ARRAY[1.0 / 3600, 1.0 / 3600], ARRAY[5, 2])");
isnt($ret, 0, 'an allowed rl_take_all does wait for the row lock');
like($err, qr/lock timeout/, 'and times out on it');

# the same setup does catch a call that needs the lock: under a raised burst
# the request is allowed, so it must update the row, and waits for the lock
($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '200ms'; SELECT allowed FROM rl_take('login', 'ada', 1.0 / 3600, 5)");
isnt($ret, 0, 'an allowed call does wait for the row lock');
like($err, qr/lock timeout/, 'and times out on it');

$holder->query_safe('COMMIT');
$holder->quit;
is($node->safe_psql('postgres', 'SELECT allowed FROM rl_take(\'login\', \'ada\', 1.0 / 3600, 5)'),
	't', 'once the lock is gone, the allowed call goes through');

# 1.3's lockout: the denial that starts one writes once (so it waits for the
# row lock), and a locked key's denials write and lock nothing, however
# long the lock lasts
$node->safe_psql('postgres', q{
	INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ('pin', 1.0 / 3600, 2, '1 hour');
	SELECT rl_take('pin', 'card', 2);
});
my $pin_row = q{SELECT xmin, xmax, ctid FROM rl_buckets
	WHERE key = sha256(convert_to('pin', 'UTF8') || '\x00'::bytea || convert_to('card', 'UTF8'))};
my $pin_take = q{SELECT allowed, retry_after > 3500 FROM rl_take('pin', 'card', 1)};
$holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN; $pin_row FOR UPDATE");
($ret, $out, $err) = $node->psql('postgres', "SET lock_timeout = '200ms'; $pin_take");
isnt($ret, 0, 'the denial that starts a lockout waits for the row lock: it writes');
like($err, qr/lock timeout/, 'and times out on it');
$holder->query_safe('COMMIT');
is($node->safe_psql('postgres', $pin_take), 'f|t', 'then it starts the lockout');
my $pin_locked = $node->safe_psql('postgres', $pin_row);
$holder->query_safe("BEGIN; $pin_row FOR UPDATE");
my $pin_held = $node->safe_psql('postgres', $pin_row);
($ret, $out, $err) = $node->psql('postgres', "SET lock_timeout = '2s'; $pin_take; $pin_take");
is($ret, 0, 'a locked key\'s denials do not wait for the lock another session holds');
is($out, "f|t\nf|t", 'and are the lockout\'s');
is($node->safe_psql('postgres', $pin_row), $pin_held, 'the row is as the holder left it');
$holder->query_safe('COMMIT');
$holder->quit;
# (xmax is the holder's lock, as it left it)
my ($xmin, $ctid) = $pin_locked =~ /^(\d+)\|\d*\|(.*)$/;
like($node->safe_psql('postgres', $pin_row), qr/^$xmin\|\d+\|\Q$ctid\E$/,
	'no denial of the locked key made a row version');

$node->stop;
done_testing();
