# The README's C example compiles as printed and does what the README says,
# with the database and without it.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = client_node('client_readme');
my $bin = build_client(readme_example(PostgreSQL::Test::Utils::tempdir() . '/signin.c'));
my $conninfo = $node->connstr('postgres');

my $first = time;
my ($ret, $out, $err) = run_program($bin, $conninfo);
is($ret, 0, 'the example runs');
is($out, "allowed, 9 left (database)\n", 'and prints what the README says');
for my $left (reverse 0 .. 8)
{
	($ret, $out, $err) = run_program($bin, $conninfo);
	is($out, "allowed, $left left (database)\n", "run: allowed, $left left");
}
($ret, $out, $err) = run_program($bin, $conninfo);
# one request per 90 s: the 11th may retry 90 s after the first one
my $elapsed = time - $first;
ok($out =~ /^denied, retry in (\d+) s \(database\)\n\z/
	  && $1 <= 90 && $1 >= 90 - $elapsed - 1,
	sprintf('the 11th run is denied until 90 s after the first (%.1f s ago)', $elapsed))
  or diag($out);

my $nowhere = PostgreSQL::Test::Utils::tempdir_short();
($ret, $out, $err) = run_program($bin, "host=$nowhere port=1");
is($ret, 0, 'without a database it still runs');
is($out, "allowed, 9 left (fallback)\n", 'decided in memory');
like($err,
	qr/^ratelimit: limiter "auth_login" is decided in memory at the same limit: the database failed \(error: .*\); it is tried again at most every 1000 ms\n\z/,
	'with one warning on stderr');

$node->stop;
done_testing();
