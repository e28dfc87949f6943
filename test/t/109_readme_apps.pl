# The README's sign-in, in each language: the programs of examples/ (Python
# with Flask and with FastAPI, Node, Go, on their client libraries),
# installed and run as their first lines say (the Node program in an
# application folder outside the checkout, its packages from the npm
# registry), behind nginx as Debian installs it
# (a copy of /etc/nginx, its default site enabled, on this test's port) with
# the README's server block and steps, on a cluster with Debian's default
# authentication set up by the README's SQL, with the README's connection
# string; directly and through PgBouncer with the README's pgbouncer.ini and
# userlist, started by Debian's SysV script (a copy of /etc/init.d/pgbouncer
# on this test's files).  Each: the README's curl check prints what it says;
# another address has its own budget; a right password gives the account's
# cell back; no e-mail address is a 400; with the server frozen (SIGSTOP) and
# stopped, each request is answered within the deadline and a margin, decided
# in memory at the same limits; once the server is back, the database decides
# again; a client's error (rl_refund revoked) is logged and answered with a
# plain 500.  The README's troubleshooting rows: Debian's default site
# answers 404; PgBouncer without its pidfile fails to start, with the reason
# in its log; without the password every sign-in is 429, and the warning
# says what the row quotes for each language.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client", "$ENV{RL_SRC}/test/docs";
use ClientTest;
use Docs;
use GoModules;
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
# PgBouncer, started as a daemon by Debian's script: its folder; and the
# programs and nginx started, stopped even when the test dies
my ($bouncer_dir, @started);
END
{
	local $?;
	thaw_cluster($node) if $node;
	$_->kill_kill for grep { $_->pumpable } @started;
	IPC::Run::run([ "$bouncer_dir/init", 'stop' ], '>', \my $out, '2>&1') if $bouncer_dir;
}

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

# the programs, installed or built as their first lines say
my $node_app = "$tmp/node_app";
mkdir $node_app;
{
	my ($install) = slurp_file("$src/examples/node/sign_in.js") =~ /\A[^\n]*: (npm install [^\n]*)/
	  or die "no npm install on the first line of sign_in.js\n";
	$install =~ s{/path/to/ratelimit/}{$src/}g;
	local %ENV = (%ENV, HOME => $tmp, npm_config_cache => "$tmp/npm");
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ 'sh', '-c', "cd '$node_app' && $install --no-audit --no-fund" ],
			'>', \$out, '2>', \$err), "the Node program's install, in a folder of its own: $install")
	  or diag("$out$err");
	PostgreSQL::Test::Utils::append_to_file("$node_app/sign_in.js", slurp_file("$src/examples/node/sign_in.js"));
}
# the Go program in module mode, from its folder, as its first lines say;
# where Debian's Go or pgx is too old for the Go client, it is left out
my ($go_skip, $goenv) = go_offline("$src/examples/go/sign_in", $tmp);
if ($go_skip)
{
	SKIP: { skip("the Go program: $go_skip", 1) }
}
else
{
	local %ENV = (%ENV, %$goenv, HOME => $tmp);
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ 'go', 'build', '-o', "$tmp/sign_in_go", '.' ],
			'>', \$out, '2>', \$err, init => sub { chdir "$src/examples/go/sign_in" or die $! }),
		'the Go program builds') or diag("$out$err");
}
my %programs = (
	python => { cmd => [ '/usr/bin/python3', "$src/examples/python/sign_in.py" ],
		env => { PYTHONPATH => "$src/clients/python/src" } },
	# served by uvicorn; the same client, so the README quotes Python's texts for it
	fastapi => { cmd => [ '/usr/bin/python3', "$src/examples/python/sign_in_fastapi.py" ],
		env => { PYTHONPATH => "$src/clients/python/src" }, client => 'python' },
	node => { cmd => [ 'sh', '-c', "cd '$node_app' && exec node sign_in.js" ], env => {} },
	go => { cmd => ["$tmp/sign_in_go"], env => {} });

# nginx as Debian installs it and runs it: /etc/nginx copied, its default
# site enabled, on this test's port and files; then the README's server
# block and its steps, as printed, on that copy.  (port, nginx, its folder)
sub start_nginx
{
	my ($name, $app_port) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $etc = "$dir/etc";
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'cp', '-rL', '/etc/nginx', $etc ], '2>', \$err) or die "cp /etc/nginx: $err";
	ok(-e "$etc/sites-enabled/default", "$name: Debian's nginx has its default site enabled");
	my $temp = join('', map { "    ${_}_temp_path $dir/$_;\n" } qw(client_body proxy fastcgi uwsgi scgi));
	for my $file (grep { -f } glob("$etc/nginx.conf $etc/sites-enabled/* $etc/conf.d/*"))
	{
		my $text = slurp_file($file);
		$text =~ s{/etc/nginx/}{$etc/}g;
		$text =~ s{^(\s*)(pid|error_log|access_log) /(?:run|var/log/nginx)/([^;\s]+)}{$1$2 $dir/$3}mg;
		$text =~ s/^\s*user\b.*\n//m;
		$text =~ s/^(http \{\n)/$1$temp/m;
		# this test's port, on localhost only: other tests run beside it
		$text =~ s/^(\s*listen) 80\b/$1 127.0.0.1:$port/mg;
		$text =~ s/^\s*listen \[::\]:80\b.*\n//mg;
		open my $fh, '>', $file or die $!;
		print $fh $text;
		close $fh;
	}
	my $conf = doc_block('nginx', qr{^# /etc/nginx/conf\.d/app\.conf});
	$conf =~ s/^(\s*listen) 80;$/$1 127.0.0.1:$port;/m
	  or die "no 'listen 80;' in the README's nginx block\n";
	$conf =~ s/^(\s*server) 127\.0\.0\.1:3000;/$1 127.0.0.1:$app_port;/m
	  or die "no 'server 127.0.0.1:3000;' in the README's nginx block\n";
	PostgreSQL::Test::Utils::append_to_file("$etc/conf.d/app.conf", $conf);
	my $h = IPC::Run::start([ 'nginx', '-e', "$dir/error.log", '-c', "$etc/nginx.conf", '-g', 'daemon off;' ],
		'>', "$dir/stdout.log", '2>&1');
	push @started, $h;
	wait_for_port($port) or diag(slurp_file("$dir/stdout.log") . slurp_file("$dir/error.log"));
	# the troubleshooting row: beside the default site, the server block
	# gets no request
	is((login($port, '127.0.0.8', { email => 'x@example.com', password => 'right' }))[0], 404,
		"$name: with the default site left, nginx answers 404 (the troubleshooting row)");

	# the README's steps after its server block; nginx of this copy: the
	# system's with this configuration
	my $steps = doc_block('sh', qr{^rm /etc/nginx/sites-enabled/default\n});
	$steps =~ s{/etc/nginx/}{$etc/}g;
	mkdir "$dir/bin";
	PostgreSQL::Test::Utils::append_to_file("$dir/bin/nginx",
		"#!/bin/sh\nexec /usr/sbin/nginx -e '$dir/error.log' -c '$etc/nginx.conf' \"\$@\"\n");
	chmod 0755, "$dir/bin/nginx";
	local $ENV{PATH} = "$dir/bin:$ENV{PATH}";
	my $master = slurp_file("$dir/nginx.pid") =~ s/\s+//gr;
	my @old = nginx_workers($master);
	ok(IPC::Run::run([ 'sh', '-ec', $steps ], '>', \$out, '2>', \$err),
		"$name: the README's nginx steps run as printed") or diag("$out$err");
	# a reload starts new workers; the old ones still take requests until
	# they exit
	for (1 .. 600)
	{
		last unless grep { kill 0, $_ } @old;
		select(undef, undef, undef, 0.1);
	}
	return ($port, $h, $dir);
}

# nginx_workers(MASTER PID): the pids of its worker processes
sub nginx_workers
{
	my ($master) = @_;
	my @workers;
	for my $pid (map { m{/(\d+)$} } glob('/proc/[0-9]*'))
	{
		open my $fh, '<', "/proc/$pid/stat" or next;
		my $stat = <$fh> // '';
		push @workers, $pid if $stat =~ /\) \S+ (\d+) / && $1 == $master;
	}
	return @workers;
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
	$ini =~ s{/etc/pgbouncer/|/var/run/postgresql/|/var/log/postgresql/}{$dir/}g;
	$ini .= "unix_socket_dir =\n";
	PostgreSQL::Test::Utils::append_to_file("$dir/pgbouncer.ini", $ini);
	# Debian's start script, on this test's files: what "service pgbouncer"
	# runs where there is no systemd
	my $init = slurp_file('/etc/init.d/pgbouncer');
	$init =~ s{/etc/pgbouncer/}{$dir/}g;
	$init =~ s{/etc/default/pgbouncer}{$dir/default}g;
	$init =~ s{^PIDDIR=/var/run/postgresql$}{PIDDIR=$dir}m or die "no PIDDIR in /etc/init.d/pgbouncer\n";
	PostgreSQL::Test::Utils::append_to_file("$dir/init", $init);
	chmod 0755, "$dir/init";
	$bouncer_dir = $dir;

	# the troubleshooting row: without its pidfile line the script fails, and
	# the log says why
	(my $no_pidfile = $ini) =~ s/^pidfile = .*\n//m;
	my ($out, $err) = ('', '');
	if (ok($no_pidfile ne $ini, "the README's pgbouncer.ini has a pidfile line"))
	{
		rename "$dir/pgbouncer.ini", "$dir/readme.ini";
		PostgreSQL::Test::Utils::append_to_file("$dir/pgbouncer.ini", $no_pidfile);
		IPC::Run::run([ "$dir/init", 'start' ], '>', \$out, '2>', \$err);
		like("$out$err", qr/failed/, "without it, Debian's script says PgBouncer failed");
		my ($row) = $readme =~ /^\| `pgbouncer failed!`[^\n]*`(daemon needs pidfile configured)`/m
		  or die "no troubleshooting row for pgbouncer failed!\n";
		like(slurp_file("$dir/pgbouncer.log"), qr/\Q$row\E/,
			"and its log says '$row', as the troubleshooting row does");
		rename "$dir/readme.ini", "$dir/pgbouncer.ini";
	}

	# the README's userlist line and restart, as printed, as postgres
	my $steps = doc_block('sh', qr/^runuser -u postgres -- psql -Atc "SELECT format/);
	$steps =~ s/^runuser -u postgres -- //mg;
	$steps =~ s{/etc/pgbouncer/}{$dir/}g;
	$steps =~ s{^service pgbouncer }{$dir/init }m or die "no 'service pgbouncer' in the README's PgBouncer steps\n";
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	($out, $err) = ('', '');
	ok(IPC::Run::run([ 'sh', '-ec', $steps ], '>', \$out, '2>', \$err),
		"the README's userlist line and restart, with Debian's script") or diag("$out$err");
	wait_for_port($port) or diag(-e "$dir/pgbouncer.log" ? slurp_file("$dir/pgbouncer.log") : "no log");
	return ($port);
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
	push @started, $app;
	ok(wait_for_port($app_port), "$name: the program listens") or diag(slurp_file("$dir/app.log"));
	my ($port, $nginx) = start_nginx($name, $app_port);
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
	# Retry-After counts down; a reason phrase's case is the server's (Werkzeug's is
	# upper), and so is a field name's (Starlette's are lower)
	s/^Retry-After: \d+$/Retry-After: N/i, s/^(HTTP\S+ \d+ .*)/lc $1/e for @got, @want;
	is_deeply(\@got, \@want, "$name: the README's curl check prints what it says")
	  or diag("$out$err" . slurp_file("$dir/app.log"));

	# the sixth failure of that account and address started their lockout
	is($node->safe_psql('app', q{SELECT lock_us FROM rl_inspect('sign_in_lockout', 'ada@example.com 127.0.0.2')}),
		'900000000', "$name: the account and address that kept failing are locked out for 15 minutes");
	is((login($port, '127.0.0.3', { email => 'ada@example.com', password => 'wrong' }))[0], 401,
		"$name: another address has its own budget");
	my @right = map { (login($port, '127.0.0.4', { email => 'carol@example.com', password => 'right' }))[0] } 1 .. 3;
	is("@right", '200 200 200', "$name: right passwords sign in");
	is(failures_left('carol@example.com'), 10, "$name: and give the account's cell back");
	is($node->safe_psql('app', q{SELECT remaining FROM rl_take('sign_in_lockout', 'carol@example.com 127.0.0.4', 0)}),
		5, "$name: and the lockout's cell of that account and address");
	is((login($port, '127.0.0.4', { password => 'right' }))[0], 400, "$name: no e-mail address is a 400");

	# a client's error: logged, and a plain 500 without the stack or paths
	$node->safe_psql('app', 'REVOKE EXECUTE ON FUNCTION rl_refund(text, text, integer) FROM web');
	my $r = HTTP::Tiny->new(local_address => '127.0.0.4', timeout => 60)
	  ->post_form("http://127.0.0.1:$port/login", { email => 'dave@example.com', password => 'right' });
	$node->safe_psql('app', 'GRANT EXECUTE ON FUNCTION rl_refund(text, text, integer) TO web');
	is($r->{status}, 500, "$name: rl_refund revoked: a right password is a 500");
	unlike($r->{content}, qr{\Q$src\E|node_modules|\bat |Traceback|permission denied},
		"$name: whose body has no stack, path or error text") or diag($r->{content});
	like(slurp_file("$dir/app.log"), qr/permission denied for function rl_refund/,
		"$name: and the error is in the program's log");

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

# the troubleshooting row "every sign-in is 429 from the start": without the
# password in the connection string, as the row quotes each language's warning
sub check_no_password
{
	my ($language) = @_;
	my ($no_password_row) = $readme =~ /^\| every sign-in is `429` from the start \|([^\n]*)/m
	  or die "no troubleshooting row for every sign-in 429\n";
	my $program = $programs{$language};
	my $client = $program->{client} // $language;
	my ($want) = $no_password_row =~ /\b\Q\u$client\E's `([^`]+)`/
	  or die "the row quotes no text of $client\n";
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $app_port = PostgreSQL::Test::Cluster::get_free_port();
	(my $no_password = $url) =~ s{^(postgres://[^:/\@]+):[^\@]*\@}{$1\@} or die "no password in $url\n";
	local %ENV = (%ENV, %{ $program->{env} }, PGPORT => $node->port,
		DATABASE_URL => $no_password, PORT => $app_port);
	my $app = IPC::Run::start($program->{cmd}, '>', "$dir/app.log", '2>&1');
	push @started, $app;
	ok(wait_for_port($app_port), "$language without the password: the program listens");
	# a warning per limiter and interval: the first may be a connection that
	# took longer than the deadline
	my (@statuses, $found);
	for (1 .. 150)
	{
		push @statuses, (login($app_port, '127.0.0.2', { email => 'ada@example.com', password => 'right' }))[0];
		last if $found = slurp_file("$dir/app.log") =~ /\Q$want\E/;
		sleep 1;
	}
	ok($found, "$language without the password: its warning says '$want'") or diag(slurp_file("$dir/app.log"));
	is_deeply([ grep { $_ != 429 } @statuses ], [], "$language without the password: every sign-in is 429");
	$app->kill_kill;
}

my ($bport) = start_readme_pgbouncer();
for my $language ('python', 'fastapi', 'node', $go_skip ? () : 'go')
{
	check_program($language, language => $language, restart => 1);
	check_program("$language through PgBouncer", language => $language, db_port => $bport);
	check_no_password($language);
}

$node->stop;
done_testing();
