# The Go client (clients/go): its go test suite, run with the race detector
# against real clusters, one per store, a third that the tests stop, stall
# (SIGSTOP) and restart, and PgBouncer in transaction mode; then the tests
# of decisions, policies and the middleware again against a cluster with the
# SQL edition (managed/) instead of the extension.  Each Go test is one
# assertion here.  Offline, in module mode, on Debian's Go sources
# (GoModules.pm); skipped, saying why, where Debian's Go or pgx is too old.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use GoModules;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{RL_SRC};
my $tmp = PostgreSQL::Test::Utils::tempdir();
my ($skip, $modenv) = go_offline("$src/clients/go", $tmp);
plan skip_all => $skip if $skip;
my @stats = ("track_functions = 'all'");
my $table = client_node('go_table', @stats);
my $memory = client_node('go_memory', @stats,
	"shared_preload_libraries = 'ratelimit'", 'ratelimit.store = memory');
my $victim = client_node('go_victim');
my $bouncer_port = start_pgbouncer($table, 'transaction', 2);

# the victim's processes run again whatever happens to the Go tests
END { thaw_cluster($victim) if $victim; }

sub connstr
{
	my ($node) = @_;
	return 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';
}

my %goenv = (
	%$modenv,
	RL_GO_TABLE => connstr($table),
	RL_GO_MEMORY => connstr($memory),
	RL_GO_VICTIM => connstr($victim),
	RL_GO_VICTIM_DATA => $victim->data_dir,
	RL_GO_BINDIR => $victim->config_data('--bindir'),
	RL_GO_PGBOUNCER => "host=127.0.0.1 port=$bouncer_port dbname=postgres",
	RL_SRC => $src);

sub go
{
	my (@args) = @_;
	local %ENV = (%ENV, %goenv);
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'go', @args ], '>', \$out, '2>', \$err, init => sub { chdir "$src/clients/go" or die $! },
		IPC::Run::timeout(1500));
	return ($? == 0, $out, $err);
}

my ($ok, $out, $err) = go('vet', '.');
ok($ok, 'go vet is clean') or diag("$out$err");

# -race where the race runtime is there (amd64 and arm64 Linux)
my ($race) = go('test', '-race', '-count=1', '-run', '^$', '.');
diag('the race detector is not available: goroutine tests run without it') unless $race;

# go_tests(LABEL, AT LEAST, ARGS): go test -json with these arguments, at
# least that many tests run; each top-level test one assertion that it passed
sub go_tests
{
	my ($label, $least, @args) = @_;
	my ($ok, $out, $err) = go('test', ($race ? ('-race') : ()), '-count=1', '-json', '-timeout', '20m', @args,
		'.');
	my (%result, @order, %output);
	for my $line (split /\n/, $out)
	{
		my $ev = eval { decode_json($line) } or next;
		next unless defined $ev->{Test};
		# a subtest's lines go to its test; its result is the test's
		my ($name, $sub) = split m{/}, $ev->{Test}, 2;
		push @order, $name unless exists $result{$name};
		$result{$name} //= '';
		$output{$name} .= $ev->{Output} if defined $ev->{Output};
		$result{$name} = $ev->{Action}
		  if !defined $sub && $ev->{Action} =~ /^(pass|fail|skip)$/;
	}
	ok(@order >= $least, "$label ran the suite (" . scalar(@order) . ' tests)') or diag("$out$err");
	for my $name (@order)
	{
		ok($result{$name} eq 'pass', "$label $name" . ($race ? ' (-race)' : ''))
		  or diag($output{$name});
	}
	ok($ok, "$label exits 0") or diag($err);
}

go_tests('go test', 15);

# the SQL edition: the tests of decisions, policies and the middleware, on
# the only store it has; what reads a part of the C extension is skipped
my $sqled = sqled_node('go_sqled', @stats);
{
	local $goenv{RL_GO_SQL_EDITION} = 1;
	local $goenv{RL_GO_TABLE} = connstr($sqled);
	delete local @goenv{qw(RL_GO_MEMORY RL_GO_VICTIM RL_GO_PGBOUNCER)};
	my @decisions = qw(TestDecisionsEqualServer TestBadUse TestRefund TestPolicyRefresh TestGoroutines
	  TestHeadersEqualServer TestMiddleware);
	go_tests('go test (SQL edition)', scalar(@decisions), '-run', '^(' . join('|', @decisions) . ')$');
}

$sqled->stop;
$victim->stop;
$memory->stop;
$table->stop;
done_testing();
