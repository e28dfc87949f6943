# The README's sign-in, in each language: the programs of examples/ (Python,
# Node, Go, on their client libraries), as printed, behind a real nginx with
# the README's configuration, on a cluster with Debian's default
# authentication set up by the README's SQL, with the README's connection
# string; directly and through PgBouncer with the README's pgbouncer.ini and
# userlist.  Each: the README's curl check prints what it says; another
# address has its own budget; a right password gives the account's cell
# back; no e-mail address is a 400; with the server frozen (SIGSTOP) and
# stopped, each request is answered within the deadline and a margin,
# decided in memory at the same limits; and once the server is back, the
# database decides again.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client", "$ENV{RL_SRC}/test/docs";
use ClientTest;
use Docs;
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $src = $ENV{RL_SRC};
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $node = debian_node('readme_apps');
END { thaw_cluster($node) if $node }

# the README's set-up, as a superuser over the socket (peer)
my $readme = slurp_file("$src/README.md");
my ($url) = $readme =~ /Its connection string is `([^`]+)`/
  or die "no connection string in the README\n";
$node->safe_psql('postgres', q{CREATE ROLE web LOGIN PASSWORD 'change-me'});
$node->safe_psql('postgres', 'CREATE DATABASE app OWNER web');
$node->safe_psql('app', 'CREATE EXTENSION ratelimit');
$node->safe_psql('app', doc_block('sql', qr/^-- as a superuser, in the database app/));
$node->safe_psql('app', doc_block('sql', qr/^-- as a superuser: a statement of web is cancelled/));
$node->safe_psql('app', doc_block('sql', qr/^-- as a superuser\nALTER ROLE web SET ratelimit\.in_transaction/));

# the programs, built or linked as their first lines say
my $node_modules = "$tmp/node_modules";
mkdir $node_modules;
symlink("$src/clients/node", "$node_modules/ratelimit-client") or die $!;
my $gopath = "$tmp/go";
mkdir $_ for $gopath, "$gopath/src";
symlink("$src/clients/go", "$gopath/src/ratelimit") or die $!;
{
	local %ENV = (%ENV, GO111MODULE => 'off', GOPATH => "$gopath:/usr/share/gocode",
		GOPROXY => 'off', GOFLAGS => '', GOCACHE => "$tmp/gocache", HOME => $tmp);
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ 'go', 'build', '-o', "$tmp/sign_in_go", "$src/examples/go/sign_in/main.go" ],
			'>', \$out, '2>', \$err), 'the Go program builds') or diag("$out$err");
}
my %programs = (
	python => { cmd => [ '/usr/bin/python3', "$src/examples/python/sign_in.py" ],
		env => { PYTHONPATH => "$src/clients/python/src" } },
	node => { cmd => [ 'node', "$src/examples/node/sign_in.js" ],
		env => { NODE_PATH => "$node_modules:$src/test/docs/node_modules" } },
	go => { cmd => ["$tmp/sign_in_go"], env => {} });

# the README's nginx block, on this test's ports
sub start_nginx
{
	my ($app_port) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $conf = doc_block('nginx', qr{^# /etc/nginx/conf\.d/app\.conf});
	$conf =~ s/^(\s*listen) 80;$/$1 127.0.0.1:$port;/m
	  or die "no 'listen 80;' in the README's nginx block\n";
	$conf =~ s/^(\s*server) 127\.0\.0\.1:3000;/$1 127.0.0.1:$app_port;/m
	  or die "no 'server 127.0.0.1:3000;' in the README's nginx block\n";
	my $temp = join('', map { "    ${_}_temp_path $dir/$_;\n" } qw(client_body proxy fastcgi uwsgi scgi));
	PostgreSQL::Test::Utils::append_to_file("$dir/nginx.conf", <<"CONF");
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log;
events {}
http {
    access_log $dir/access.log;
$temp
$conf
}
CONF
	my $h = IPC::Run::start([ 'nginx', '-p', $dir, '-e', "$dir/error.log", '-c', "$dir/nginx.conf" ],
		'>', "$dir/stdout.log", '2>&1');
	wait_for_port($port) or diag(slurp_file("$dir/error.log"));
	return ($port, $h);
}

# the README's pgbouncer.ini and userlist, on this test's ports and files
sub start_readme_pgbouncer
{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $ini = doc_block('ini', qr{^; /etc/pgbouncer/pgbouncer\.ini});
	my $pg_port = $node->port;
	$ini =~ s/^(app = host=localhost)/$1 port=$pg_port/m or die "no app line in pgbouncer.ini\n";
	$ini =~ s/^listen_port = 6432$/listen_port = $port/m or die "no listen_port in pgbouncer.ini\n";
	$ini =~ s{/etc/pgbouncer/}{$dir/}g;
	$ini .= "unix_socket_dir =\nlogfile = $dir/pgbouncer.log\npidfile = $dir/pgbouncer.pid\n";
	PostgreSQL::Test::Utils::append_to_file("$dir/pgbouncer.ini", $ini);
	my ($users) = doc_block('sh', qr/^runuser -u postgres -- psql -Atc "SELECT format/) =~ /\A([^\n]*)/;
	$users =~ s/^runuser -u postgres -- //;
	$users =~ s{/etc/pgbouncer/}{$dir/}g;
	my ($out, $err) = ('', '');
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	ok(IPC::Run::run([ 'sh', '-c', $users ], '>', \$out, '2>', \$err),
		"the README's userlist line: $users") or diag($err);
	my ($bouncer) = grep { -x } map { "$_/pgbouncer" } '/usr/sbin', split(/:/, $ENV{PATH});
	my $h = IPC::Run::start([ $bouncer, "$dir/pgbouncer.ini" ], '>', "$dir/stdout.log", '2>&1');
	wait_for_port($port) or diag(slurp_file("$dir/stdout.log"));
	return ($port, $h);
}

sub wait_for_port
{
	my ($port) = @_;
	for (1 .. 600)
	{
		return 1 if IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port);
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# login(NGINX PORT, SOURCE ADDRESS, FORM): (status, Retry-After, seconds)
sub login
{
	my ($port, $from, $form) = @_;
	my $start = time;
	my $r = HTTP::Tiny->new(local_address => $from, timeout => 60)
	  ->post_form("http://127.0.0.1:$port/login", $form);
	return ($r->{status}, $r->{headers}{'retry-after'}, time - $start);
}

# failures_left(EMAIL): the account's cells, as the database sees them
sub failures_left
{
	$node->safe_psql('app', qq{SELECT remaining FROM rl_take('sign_in_failures', '$_[0]', 0)});
}

sub check_program
{
	my ($name, %opt) = @_;
	my $program = $programs{ $opt{language} };
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $app_port = PostgreSQL::Test::Cluster::get_free_port();
	(my $app_url = $url) =~ s{\@localhost/}{\@localhost:$opt{db_port}/} if $opt{db_port};
	local %ENV = (%ENV, %{ $program->{env} }, PGPORT => $node->port,
		DATABASE_URL => $app_url // $url, PORT => $app_port);
	$node->safe_psql('app', 'DELETE FROM rl_buckets');

	my $app = IPC::Run::start($program->{cmd}, '>', "$dir/app.log", '2>&1');
	ok(wait_for_port($app_port), "$name: the program listens") or diag(slurp_file("$dir/app.log"));
	my ($port, $nginx) = start_nginx($app_port);
	# its first call reads the policies: wait for it, as a user's first request would
	for (1 .. 50)
	{
		last if (login($port, '127.0.0.9', { email => 'warm@example.com', password => 'right' }))[0] == 200;
		sleep 1;
	}

	# the README's check, against this nginx
	my $check = doc_block('sh', qr/^# a request from 127\.0\.0\.1 is the trusted proxy's own/);
	my @want = map { s/^# //r } grep { /^# / } split /\n/, $check;
	shift @want;	# the line that says where to run it
	$check =~ s{http://127\.0\.0\.1/}{http://127.0.0.1:$port/}g
	  or die "no http://127.0.0.1/ in the README's check\n";
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'sh', '-c', $check ], '>', \$out, '2>', \$err);
	my @got = grep { /\S/ } split /\r?\n/, $out;
	s/\s+$// for @got;
	# Retry-After counts down; a reason phrase's case is the server's (Werkzeug's is upper)
	s/^(Retry-After: )\d+$/$1 . 'N'/ei, s/^(HTTP\S+ \d+ .*)/lc $1/e for @got, @want;
	is_deeply(\@got, \@want, "$name: the README's curl check prints what it says")
	  or diag("$out$err" . slurp_file("$dir/app.log"));

	is((login($port, '127.0.0.3', { email => 'ada@example.com', password => 'wrong' }))[0], 401,
		"$name: another address has its own budget");
	my @right = map { (login($port, '127.0.0.4', { email => 'carol@example.com', password => 'right' }))[0] } 1 .. 3;
	is("@right", '200 200 200', "$name: right passwords sign in");
	is(failures_left('carol@example.com'), 10, "$name: and give the account's cell back");
	is((login($port, '127.0.0.4', { password => 'right' }))[0], 400, "$name: no e-mail address is a 400");

	# a frozen server: every process stopped, the socket accepts and never answers
	freeze_cluster($node);
	my @frozen = map { [ login($port, '127.0.0.5', { email => "frozen$_\@example.com", password => 'wrong' }) ] } 1 .. 6;
	thaw_cluster($node);
	is(join(' ', map { $_->[0] } @frozen), '401 401 401 401 401 429',
		"$name: the server frozen: the address's limit holds, decided in memory");
	my $slowest = (sort { $b <=> $a } map { $_->[2] } @frozen)[0];
	cmp_ok($slowest, '<', 2, "$name: and each request is answered within the deadline and a margin ("
		  . sprintf('%.2f s', $slowest) . ')');

	if ($opt{restart})
	{
		$node->stop('fast');
		my @down = map { (login($port, '127.0.0.6', { email => "down$_\@example.com", password => 'wrong' }))[0] } 1 .. 6;
		is("@down", '401 401 401 401 401 429', "$name: the server stopped: decided in memory at the same limit");
		$node->start;
		my $back;
		for (1 .. 40)
		{
			login($port, '127.0.0.7', { email => 'back@example.com', password => 'wrong' });
			last if ($back = failures_left('back@example.com')) < 10;
			sleep 1;
		}
		cmp_ok($back, '<', 10, "$name: the server back: the database decides again")
		  or diag(slurp_file("$dir/app.log"));
	}
	$nginx->kill_kill;
	$app->kill_kill;
}

my ($bport, $bouncer) = start_readme_pgbouncer();
for my $language (qw(python node go))
{
	check_program($language, language => $language, restart => 1);
	check_program("$language through PgBouncer", language => $language, db_port => $bport);
}
$bouncer->kill_kill;

$node->stop;
done_testing();
