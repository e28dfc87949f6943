# Helpers for the clients' TAP tests: start a cluster with the extension (or
# the SQL edition), build a test program from test/client/ with a sanitizer,
# run it and relay its TAP lines, doing what it asks for on its "@@ step"
# lines (stop the server, ...), and start PgBouncer.
package ClientTest;

use strict;
use warnings;
use Exporter 'import';
use File::Basename;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(client_node sqled_node build_client run_client run_program start_pgbouncer
  readme_example cluster_processes freeze_cluster thaw_cluster);

my $src = $ENV{RL_SRC} or die "RL_SRC is not set\n";

# client_node(NAME, CONF LINE...): a started cluster with the extension.
sub client_node
{
	my $node = started_node(@_);
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
	return $node;
}

# sqled_node(NAME, CONF LINE...): a started cluster with the SQL edition
# (managed/) instead, installed in schema public by rl_sql_owner, a role
# that may create objects there and is no superuser.
sub sqled_node
{
	my ($name) = @_;
	my $node = started_node(@_);
	$node->safe_psql('postgres', 'CREATE ROLE rl_sql_owner LOGIN; GRANT CREATE ON SCHEMA public TO rl_sql_owner');
	$node->command_ok(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-U', 'rl_sql_owner', '-f', "$src/managed/ratelimit_sql--1.3.sql" ],
		"$name: the SQL edition installs");
	return $node;
}

sub started_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', join("\n", @conf, ''));
	$node->start;
	return $node;
}

# build_client(SOURCE, [sanitizer => 'address' | 'thread']): compile a C
# file (a path, or a name in test/client/) with the client header and libpq;
# returns the binary.  AddressSanitizer comes with UBSan and leak detection.
# A C++ file (a path ending in .cpp) is built with g++ (clang++ for the
# thread sanitizer) and linked with the implementation, which is C, built
# from test/client/implementation.c.
sub build_client
{
	my ($source, %opt) = @_;
	my $sanitizer = $opt{sanitizer} // 'address';
	$source = "$src/test/client/$source.c" unless $source =~ m{/};
	my $cplusplus = $source =~ /\.cpp$/;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $bin = "$dir/" . basename($source, '.c', '.cpp') . "_$sanitizer";
	my $cc = $sanitizer eq 'thread' ? 'clang' : 'cc';
	my $cxx = $sanitizer eq 'thread' ? 'clang++' : 'g++';
	my @flags = (
		'-Wall', '-Wextra', '-Werror', '-g', '-O1', '-fno-omit-frame-pointer',
		$sanitizer eq 'thread'
		? ('-fsanitize=thread')
		: ('-fsanitize=address,undefined', '-fno-sanitize-recover=all'),
		"-I$src/include", "-I$src/test/client");
	my @libpq = split(' ', `pkg-config --cflags --libs libpq`);
	my @cmd = $cplusplus
	  ? ($cxx, '-std=c++17', @flags, '-o', $bin, $source, "$dir/implementation.o",
		@libpq, '-pthread', '-lm')
	  : ($cc, '-std=c11', @flags, '-o', $bin, $source, @libpq, '-pthread', '-lm');
	my ($out, $err) = ('', '');
	my $built = 1;
	if ($cplusplus)
	{
		my @c = ($cc, '-std=c11', @flags, '-c', '-o', "$dir/implementation.o",
			"$src/test/client/implementation.c", @libpq);
		$built = IPC::Run::run(\@c, '>', \$out, '2>', \$err);
		ok($built, "implementation.c builds with $cc -fsanitize=$sanitizer")
		  or diag("@c\n$out$err");
	}
	$built &&= IPC::Run::run(\@cmd, '>', \$out, '2>', \$err);
	ok($built, basename($source) . " builds with " . ($cplusplus ? $cxx : $cc)
		  . " -Wall -Wextra -Werror -fsanitize=$sanitizer")
	  or diag("@cmd\n$out$err");
	return $bin;
}

my %sanitizer_env = (
	ASAN_OPTIONS => 'detect_leaks=1:halt_on_error=1',
	UBSAN_OPTIONS => 'halt_on_error=1:print_stacktrace=1',
	TSAN_OPTIONS => 'halt_on_error=1:second_deadlock_stack=1');

# run_program(BINARY, ARG...): run a program that is not a test, with the
# sanitizers' settings; returns (exit status, stdout, stderr).
sub run_program
{
	my ($bin, @args) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %sanitizer_env);
	IPC::Run::run([ $bin, @args ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(300));
	return ($?, $out, $err);
}

# readme_example(FILE): the first C block of docs/c-client.md, written to
# FILE, so that the tests build it exactly as printed.
sub readme_example
{
	my ($file) = @_;
	my $page = PostgreSQL::Test::Utils::slurp_file("$src/docs/c-client.md");
	my ($code) = $page =~ /^```c\n(.*?)^```$/ms
	  or die "docs/c-client.md has no C example\n";
	PostgreSQL::Test::Utils::append_to_file($file, $code);
	return $file;
}

# run_client(BINARY, args => [...], steps => {NAME => CODE}, wrap => [...]):
# run it, relay its TAP lines as tests, answer its steps, then check that it
# ran its whole plan and exited 0 (a sanitizer report or a leak exits non-zero).
sub run_client
{
	my ($bin, %opt) = @_;
	my $name = basename($bin);
	my ($in, $out, $err) = ('', '', '');
	my ($run, $plan) = (0, -1);
	my $timer = IPC::Run::timeout($opt{timeout} // 900);

	local %ENV = (%ENV, %sanitizer_env);
	my @cmd = (@{ $opt{wrap} // [] }, $bin, @{ $opt{args} // [] });
	my $h = IPC::Run::start(\@cmd, '<', \$in, '>', \$out, '2>', \$err, $timer);
	eval {
		for (;;)
		{
			while ($out =~ s/^([^\n]*)\n//)
			{
				my $line = $1;
				if ($line =~ /^@@ (\S+)$/)
				{
					my $step = $opt{steps}{$1}
					  or die "$name asked for unknown step $1\n";
					$step->();
					$in .= "go\n";
				}
				elsif ($line =~ /^(not )?ok \d+ - (.*)$/)
				{
					ok(!defined $1, "$name: $2");
					$run++;
				}
				elsif ($line =~ /^1\.\.(\d+)$/) { $plan = $1; }
				elsif ($line =~ /^# ?(.*)$/) { diag("$name: $1"); }
				else { diag("$name printed: $line"); }
			}
			last unless $h->pumpable;
			$h->pump;
		}
		$h->finish;
		1;
	} or do {
		diag("$name: $@");
		$h->kill_kill;
	};
	is($h->full_result(0), 0, "$name exits 0, with no sanitizer report")
	  or diag("stderr of $name:\n$err");
	is($plan, $run, "$name ran its whole plan ($run tests)");
	return $err;
}

# the PgBouncers started below end with the test file, however it ends
my @bouncers;
END { local $?; eval { $_->kill_kill } for @bouncers; }

# start_pgbouncer(NODE, POOL_MODE, DEFAULT_POOL_SIZE, [users => [...]],
# [settings => [...]]): PgBouncer on a free loopback port in front of NODE's
# Unix socket, for this OS user's role and the users named, with more lines
# for its [pgbouncer] section.  Returns its port.
sub start_pgbouncer
{
	my ($node, $mode, $pool, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = getpwuid($<);
	my ($host, $pgport) = ($node->host, $node->port);
	my ($bouncer) = grep { -x } map { "$_/pgbouncer" } split(/:/, $ENV{PATH}),
	  '/usr/sbin', '/usr/local/sbin';
	die "pgbouncer is not installed\n" unless $bouncer;

	PostgreSQL::Test::Utils::append_to_file("$dir/users.txt",
		join('', map { qq{"$_" ""\n} } $user, @{ $opt{users} // [] }));
	my $settings = join("\n", @{ $opt{settings} // [] });
	PostgreSQL::Test::Utils::append_to_file("$dir/pgbouncer.ini", <<"INI");
[databases]
postgres = host=$host port=$pgport dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = $mode
default_pool_size = $pool
max_client_conn = 100
logfile = $dir/pgbouncer.log
$settings
INI
	my $h = IPC::Run::start([ $bouncer, "$dir/pgbouncer.ini" ],
		'>', "$dir/stdout.log", '2>&1');
	push @bouncers, $h;
	for (1 .. 100)
	{
		last if IPC::Run::run(
			[ 'psql', '-X', '-At', '-h', '127.0.0.1', '-p', $port, '-d', 'postgres',
			  '-c', 'SELECT 1' ], '>', \my $o, '2>', \my $e);
		select(undef, undef, undef, 0.1);
	}
	return $port;
}

# cluster_processes(NODE): the postmaster of NODE and its children (every
# server process), from postmaster.pid and /proc; none when it is down.
sub cluster_processes
{
	my ($node) = @_;
	my $pidfile = $node->data_dir . '/postmaster.pid';
	return () unless -f $pidfile;
	my ($postmaster) = split /\n/, PostgreSQL::Test::Utils::slurp_file($pidfile);
	my @pids = ($postmaster);
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open(my $fh, '<', $stat) or next;
		my $line = <$fh> // next;
		# the command name may hold spaces and parentheses: ppid follows the last ")"
		push @pids, $1 if $line =~ /^(\d+) .*\) \S+ (\d+) / && $2 == $postmaster;
	}
	return @pids;
}

# freeze_cluster(NODE): stop every server process with SIGSTOP, as a frozen
# host or a dropped network does (connections accept bytes and never answer);
# thaw_cluster(NODE) lets them run again.  A test that freezes a cluster
# thaws it in every exit path: END { thaw_cluster($node) }.
sub freeze_cluster { kill 'STOP', cluster_processes($_[0]) }
sub thaw_cluster { kill 'CONT', cluster_processes($_[0]) }

1;
