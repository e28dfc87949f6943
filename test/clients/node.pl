# The Node client (clients/node): npm ci from its committed lock file, its
# typed usage file checked by tsc --noEmit, then its own tests (node --test)
# against real clusters: one per store for the decisions, one that the
# tests stop, start and freeze (SIGSTOP), and PgBouncer in transaction mode;
# then the decision and middleware tests again against a cluster with the
# SQL edition (managed/) instead of the extension.  Each test of node's
# runner is one assertion here.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $dir = "$ENV{RL_SRC}/clients/node";
my $cache = PostgreSQL::Test::Utils::tempdir();
local $ENV{npm_config_cache} = $cache;
local $ENV{npm_config_update_notifier} = 'false';

my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'npm', 'ci', '--no-audit', '--no-fund', '--loglevel=error' ],
		'>', \$out, '2>', \$err, init => sub { chdir $dir }),
	'npm ci installs what package-lock.json names')
  or BAIL_OUT("npm ci failed: $out$err");
ok(IPC::Run::run([ "$dir/node_modules/.bin/tsc", '--noEmit', '-p', 'test/types' ],
		'>', \$out, '2>', \$err, init => sub { chdir $dir }),
	'index.d.ts types the usage file test/types/usage.ts (tsc --noEmit)')
  or diag("$out$err");

my @preload = ("shared_preload_libraries = 'ratelimit'", "track_functions = 'all'");
my %nodes = (
	table => client_node('node_table', @preload),
	memory => client_node('node_memory', @preload, 'ratelimit.store = memory'),
	outage => client_node('node_outage', @preload),);
my $bouncer_port = start_pgbouncer($nodes{table}, 'transaction', 2);

my %clusters = map {
	my $n = $nodes{$_};
	($_ => { host => $n->host, port => $n->port, pgdata => $n->data_dir,
		log => $n->logfile })
} keys %nodes;
$clusters{pgbouncer} = { host => '127.0.0.1', port => $bouncer_port };

# SIGCONT every process of our clusters, whatever a test left behind
sub thaw { thaw_cluster($_) for values %nodes }

# node_tests(LABEL, CLUSTERS, ENV, FILES): node --test on FILES (all when
# none) with RL_CLUSTERS and these variables; each test one assertion
sub node_tests
{
	my ($label, $clusters, $env, @files) = @_;
	@files = map { s{^\Q$dir/\E}{}r } glob("$dir/test/*.test.js") unless @files;
	my @cmd = ('node', '--test', '--test-reporter=tap', '--test-concurrency=1', @files);
	my $tap = '';
	local %ENV = (%ENV, %$env, RL_CLUSTERS => encode_json($clusters));
	my $h = IPC::Run::start(\@cmd, init => sub { chdir $dir }, '>', \$tap, '2>&1',
		IPC::Run::timeout(900));
	eval { $h->finish; 1 } or do { diag("node --test: $@"); $h->kill_kill; };
	thaw();
	my $status = $h->full_result(0);

	# top-level lines are the tests; indented ones their details
	my $tests = 0;
	my @lines = split /\n/, $tap;
	for my $i (0 .. $#lines)
	{
		next unless $lines[$i] =~ /^(not )?ok \d+ - (.*?)(?: # .*)?$/;
		my ($bad, $name) = ($1, $2);
		$tests++;
		ok(!$bad, "$label: $name");
		if ($bad)
		{
			my @detail;
			for (my $j = $i - 1; $j >= 0 && $lines[$j] =~ /^\s/; $j--) { unshift @detail, $lines[$j]; }
			for (my $j = $i + 1; $j <= $#lines && $lines[$j] =~ /^\s/; $j++) { push @detail, $lines[$j]; }
			diag(join("\n", @detail));
		}
	}
	my ($counted) = $tap =~ /^# tests (\d+)$/m;
	ok($tests > 0 && defined $counted && $counted == $tests, "$label --test ran $tests tests, as it counted")
	  or diag($tap);
	is($status, 0, "$label --test exits 0") or diag(join("\n", grep { !/^\s*(ok|---|\.\.\.|duration_ms)/ } @lines));
}

node_tests('node', \%clusters, { RL_PG_BIN => $nodes{outage}->config_data('--bindir') });

# the SQL edition: the tests of decisions, policies and the middleware, on
# the only store it has; those that read a part of the C extension are
# skipped
$nodes{sqled} = sqled_node('node_sqled', "track_functions = 'all'");
node_tests('node (SQL edition)',
	{ table => { host => $nodes{sqled}->host, port => $nodes{sqled}->port } },
	{ RL_SQL_EDITION => 1 }, 'test/decisions.test.js', 'test/http.test.js');

$_->stop("fast", fail_ok => 1) for values %nodes;
done_testing();
