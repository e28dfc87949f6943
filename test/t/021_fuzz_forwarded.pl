# A short, fixed run of the libFuzzer target of the header parser on the seed
# corpus made from test/vectors/client_ip.tsv (test/fuzz/run builds it with
# AddressSanitizer and UndefinedBehaviorSanitizer).  Any crash, sanitizer
# report or failed property makes the run exit non-zero.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;

my $runs = 50000;
my $dir = PostgreSQL::Test::Utils::tempdir();
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ "$ENV{RL_SRC}/test/fuzz/run", $dir, "-runs=$runs", '-seed=1',
		"-artifact_prefix=$dir/" ],
	'>', \$out, '2>', \$err);

ok($ok, "the fuzz target runs $runs inputs without a finding")
  or diag($err =~ s/^"\\.*\n//mgr);
my ($seeds) = $out =~ /^(\d+) seeds$/m;
cmp_ok($seeds // 0, '>=', 4 * 118, 'the seed corpus holds the vectors');
like($err, qr/^Done $runs runs/m, 'all runs were made');

done_testing();
