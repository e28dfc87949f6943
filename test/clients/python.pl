# The Python client's own tests (pytest, clients/python/tests) against real
# clusters: one per store for the decisions, one that the tests stop,
# restart and stall with SIGSTOP, and PgBouncer in transaction mode; then
# the decision and limit tests again against a cluster with the SQL edition
# (managed/) instead of the extension.  Each pytest test is one assertion
# here.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{RL_SRC};

sub cluster
{
	my ($name, $store) = @_;
	# track_functions: the tests count the functions the client calls
	my @conf = ("listen_addresses = '127.0.0.1'", "max_connections = 100", "track_functions = 'all'");
	my $node = $store eq 'sqled'
	  ? sqled_node($name, @conf)
	  : client_node($name, @conf, "shared_preload_libraries = 'ratelimit'", "ratelimit.store = $store");
	$node->safe_psql('postgres', q{
		CREATE ROLE web LOGIN;
		INSERT INTO rl_policies VALUES ('sign_in_ip', 100.0 / 3600, 100), ('sign_in_failures', 5.0 / 3600, 5);
		GRANT EXECUTE ON FUNCTION rl_refund(text, text, integer) TO web;
	});
	return $node;
}

sub dsn
{
	my ($node, $port) = @_;
	return "host=127.0.0.1 port=" . ($port // $node->port) . " dbname=postgres user=postgres sslmode=disable";
}

my %nodes = (table => cluster('py_table', 'table'), memory => cluster('py_memory', 'memory'),
	outage => cluster('py_outage', 'table'));
my $bouncer_port = start_pgbouncer($nodes{table}, 'transaction', 2, users => ['web']);

# the outage cluster may be stopped by SIGSTOP when pytest dies: SIGCONT it
# in every exit path, before the clusters are torn down
sub resume_outage { thaw_cluster($nodes{outage}) }
END { resume_outage(); }
$SIG{INT} = $SIG{TERM} = sub { resume_outage(); exit 1; };

# pytest(LABEL, ENV, ARGS): pytest with these variables and arguments; each
# of its tests one assertion, named after LABEL
sub pytest
{
	my ($label, $env, @args) = @_;
	my $tap = PostgreSQL::Test::Utils::tempdir() . '/pytest.tap';
	my ($out, $err) = ('', '');
	{
		local %ENV = (%ENV, %$env, RL_TAP => $tap,
			PYTHONPATH => "$src/clients/python/src", PYTHONDONTWRITEBYTECODE => 1);
		IPC::Run::run([ '/usr/bin/python3', '-m', 'pytest', '-p', 'no:cacheprovider', '-q',
			'-rfE', @args ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(1200));
	}
	my $ran = 0;
	for my $line (split /\n/, -e $tap ? slurp_file($tap) : '')
	{
		my ($not, $name) = $line =~ /^(not )?ok \d+ - (.*)$/ or next;
		ok(!defined $not, "$label $name");
		$ran++;
	}
	ok($ran > 0, "$label ran $ran tests") or diag("pytest printed:\n$out$err");
	diag("pytest printed:\n$out$err") if $out =~ /failed|error/i;
}

pytest('pytest', {
		RL_TABLE_DSN => dsn($nodes{table}), RL_MEMORY_DSN => dsn($nodes{memory}),
		RL_OUTAGE_DSN => dsn($nodes{outage}), RL_OUTAGE_PGDATA => $nodes{outage}->data_dir,
		RL_BOUNCER_DSN => "host=127.0.0.1 port=$bouncer_port dbname=postgres user=postgres sslmode=disable",
		RL_PGBIN => $nodes{outage}->config_data('--bindir') },
	"$src/clients/python/tests", @ARGV);

# the SQL edition: the tests of decisions, policies and limits, on the only
# store it has; those that read a part of the C extension are skipped
$nodes{sqled} = cluster('py_sqled', 'sqled');
pytest('pytest (SQL edition)', { RL_SQL_EDITION => 1, RL_TABLE_DSN => dsn($nodes{sqled}) },
	map { "$src/clients/python/tests/$_" } 'test_decisions.py', 'test_limits.py');

resume_outage();
$_->stop('fast', fail_ok => 1) for values %nodes;
done_testing();
