# The README's Node, Python and Go programs, as printed, each behind a real
# nginx with the README's configuration and the README's trusted_proxies
# setting: two client addresses get separate budgets, a made-up
# X-Forwarded-For stays limited, a denial sets Retry-After, and a stopped
# database is a 503 and no crash.  The Python one also through PgBouncer in
# transaction mode.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client", "$ENV{RL_SRC}/test/docs";
use ClientTest;
use Readme;
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{RL_SRC};
my $node = PostgreSQL::Test::Cluster->new('readme_apps');
$node->init;
$node->append_conf('postgresql.conf', "listen_addresses = '127.0.0.1'");
$node->start;
# in_transaction = error: an app that runs rl_take in a transaction block
# gets an error on every request
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE ROLE web LOGIN;
	ALTER ROLE web SET ratelimit.in_transaction = error;
});
$node->safe_psql('postgres', readme_block('sql', qr/^-- as a superuser, in the application's database/));
$node->safe_psql('postgres', readme_block('sql', qr/^-- as a superuser: a statement of web is cancelled/));
my $check = readme_block('sql', qr/^-- as web, in a new session/);
my ($expected) = $check =~ /-- (\S+)\n\z/;
is($node->safe_psql('postgres', $check, extra_params => [ '-U', 'web' ]),
	$expected, "the README's check answers $expected");

# the README's nginx block, on this test's ports
sub start_nginx
{
	my ($app_port) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $conf = readme_block('nginx', qr{^# /etc/nginx/conf\.d/app\.conf});
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

# post(NGINX PORT, SOURCE ADDRESS, [X-Forwarded-For]): (status, Retry-After)
sub post
{
	my ($port, $from, $xff) = @_;
	my $http = HTTP::Tiny->new(local_address => $from, timeout => 60);
	my $r = $http->post("http://127.0.0.1:$port/login",
		{ headers => { defined $xff ? ('X-Forwarded-For' => $xff) : () } });
	return ($r->{status}, $r->{headers}{'retry-after'});
}

# check_app(NAME, COMMAND, DATABASE URL, SETUP): run the app behind nginx
sub check_app
{
	my ($name, $cmd, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $app_port = PostgreSQL::Test::Cluster::get_free_port();
	my $db_port = $opt{db_port} // $node->port;
	local $ENV{DATABASE_URL} = "postgresql://web\@127.0.0.1:$db_port/postgres?sslmode=disable";
	local $ENV{PORT} = $app_port;
	$node->safe_psql('postgres', 'DELETE FROM rl_buckets');

	my $app = IPC::Run::start($cmd, init => sub { chdir $opt{cwd} if $opt{cwd} },
		'>', "$dir/app.log", '2>&1');
	ok(wait_for_port($app_port), "$name: the app listens") or diag(slurp_file("$dir/app.log"));
	my ($port, $nginx) = start_nginx($app_port);

	my @s = map { (post($port, '127.0.0.2'))[0] } 1 .. 5;
	is("@s", '200 200 200 200 200', "$name: 127.0.0.2 is allowed five times")
	  or diag(slurp_file("$dir/app.log"));
	my ($status, $retry) = post($port, '127.0.0.2');
	ok($status == 429 && defined $retry && $retry =~ /^\d+$/ && $retry >= 1 && $retry <= 12,
		"$name: then 429 with Retry-After (got $status, " . ($retry // 'none') . ')');
	($status) = post($port, '127.0.0.2', '203.0.113.9');
	is($status, 429, "$name: a made-up X-Forwarded-For stays limited");
	($status) = post($port, '127.0.0.3');
	is($status, 200, "$name: 127.0.0.3 has its own budget");
	if ($opt{burst})
	{
		# enough requests on each pooled connection for a driver to prepare
		# its statement, from an address with a fresh budget
		my %seen;
		$seen{ (post($port, '127.0.0.4'))[0] }++ for 1 .. $opt{burst};
		is(join(' ', map { "$_ x$seen{$_}" } sort keys %seen), "200 x5 429 x" . ($opt{burst} - 5),
			"$name: $opt{burst} requests from 127.0.0.4: 5 allowed, the rest limited");
	}

	if ($opt{readme_check})
	{
		# the README's check, from a fresh budget, against this nginx
		$node->safe_psql('postgres', 'DELETE FROM rl_buckets');
		my $check = readme_block('sh', qr/^# from another machine/);
		my @want = map { s/^# //r } grep { /^# / } split /\n/, $check;
		shift @want for 1 .. 2;	# the two lines that say where to run it
		$check =~ s{http://127\.0\.0\.1/}{http://127.0.0.1:$port/}g
		  or die "no http://127.0.0.1/ in the README's check\n";
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'sh', '-c', $check ], '>', \$out, '2>', \$err);
		my @got = grep { /\S/ } split /\r?\n/, $out;
		s/\s+$// for @got;
		s/^(Retry-After: )\d+$/$1 . 'N'/e for @got, @want;
		is_deeply(\@got, \@want, "$name: the README's curl check prints what it says")
		  or diag("$out$err");
	}

	$node->stop('fast');
	my @down = map { (post($port, '127.0.0.3'))[0] } 1 .. 2;
	is("@down", '503 503', "$name: the database stopped: 503, and the app lives on");
	$node->start;
	my @after;
	for (1 .. 40)
	{
		push @after, (post($port, '127.0.0.3'))[0];
		last if $after[-1] != 503;
		sleep 1;
	}
	is($after[-1], 200, "$name: the database back: allowed again (@after)")
	  or diag(slurp_file("$dir/app.log"));

	$nginx->kill_kill;
	$app->kill_kill;
}

my $tmp = PostgreSQL::Test::Utils::tempdir();

# Node: express and pg from the npm registry (test/docs/package.json)
PostgreSQL::Test::Utils::append_to_file("$tmp/app.js", readme_block('js', qr{^// app\.js: }));
{
	local $ENV{NODE_PATH} = "$src/test/docs/node_modules";
	check_app('node', [ 'node', "$tmp/app.js" ], readme_check => 1);
}

# Python: Flask, psycopg 3 and psycopg_pool from Debian
mkdir "$tmp/py";
PostgreSQL::Test::Utils::append_to_file("$tmp/py/app.py", readme_block('python', qr{^# app\.py: }));
my @flask = ('/usr/bin/python3', '-m', 'flask', '--app', 'app', 'run', '--port', '$PORT');
sub flask { [ map { $_ eq '$PORT' ? $ENV{PORT} : $_ } @flask ] }
check_app('python', sub { exec @{ flask() } }, cwd => "$tmp/py");
{
	# the README's advice: a client waits for a server connection a few
	# seconds at most, not the default two minutes
	my ($bport, $bouncer) = start_pgbouncer($node, 'transaction', 1,
		users => ['web'], settings => [ readme_block('ini', qr/^; pgbouncer\.ini/) ]);
	check_app('python through PgBouncer', sub { exec @{ flask() } }, cwd => "$tmp/py",
		db_port => $bport, burst => 30);
	$bouncer->kill_kill;
}

# Go: GOPATH mode, offline, with Debian's lib/pq
my $gopath = "$tmp/gopath";
mkdir $_ for $gopath, "$gopath/src", "$gopath/src/app";
PostgreSQL::Test::Utils::append_to_file("$gopath/src/app/main.go", readme_block('go', qr{^// main\.go: }));
{
	local %ENV = (%ENV, GO111MODULE => 'off', GOPATH => "$gopath:/usr/share/gocode",
		GOPROXY => 'off', GOFLAGS => '', GOCACHE => "$tmp/gocache", HOME => $tmp);
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ 'go', 'build', '-o', "$tmp/goapp", 'app' ], '>', \$out, '2>', \$err),
		'the Go program builds') or diag("$out$err");
}
check_app('go', [ "$tmp/goapp" ]);

# The "HTTP headers" programs, each on its own port: the RateLimit fields on
# every response, and Retry-After on the 429, from rl_headers.
$node->safe_psql('postgres', readme_block('sql', qr/^-- the API's limit/));

# get_api(PORT, SOURCE ADDRESS): (status, RateLimit-Policy, RateLimit, Retry-After)
sub get_api
{
	my ($port, $from) = @_;
	my $r = HTTP::Tiny->new(local_address => $from, timeout => 60)->get("http://127.0.0.1:$port/api");
	return ($r->{status}, @{ $r->{headers} }{qw(ratelimit-policy ratelimit retry-after)});
}

sub check_headers
{
	my ($name, $cmd, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	local $ENV{DATABASE_URL} = "postgresql://web\@127.0.0.1:@{[ $node->port ]}/postgres?sslmode=disable";
	local $ENV{PORT} = $port;
	$node->safe_psql('postgres', 'DELETE FROM rl_buckets');
	my $app = IPC::Run::start($cmd, init => sub { chdir $opt{cwd} if $opt{cwd} },
		'>', "$dir/app.log", '2>&1');
	ok(wait_for_port($port), "$name headers: the app listens") or diag(slurp_file("$dir/app.log"));

	my @r = get_api($port, '127.0.0.5');
	is(join(' | ', map { $_ // 'none' } @r), '200 | "api";q=3;w=60 | "api";r=2;t=20 | none',
		"$name headers: the first request: the policy, 2 left, the next cell in 20 s")
	  or diag(slurp_file("$dir/app.log"));
	my @s = map { (get_api($port, '127.0.0.5'))[0] } 1 .. 2;
	is("@s", '200 200', "$name headers: two more allowed");
	my ($status, $policy, $ratelimit, $retry) = get_api($port, '127.0.0.5');
	ok($status == 429 && defined $retry && $retry =~ /^\d+$/ && $retry >= 1 && $retry <= 20
		  && $ratelimit eq qq{"api";r=0;t=$retry} && $policy eq '"api";q=3;w=60',
		"$name headers: the fourth is 429 with Retry-After and RateLimit r=0 (got $status, "
		  . join(', ', map { $_ // 'none' } $retry, $ratelimit, $policy) . ')');
	is((get_api($port, '127.0.0.6'))[0], 200, "$name headers: another client is allowed");
	$app->kill_kill;
}

# in_each_language(NAME, CHECK): the README's Node, Python and Go programs
# NAME.js, NAME.py and NAME.go, as printed, each run through CHECK.
sub in_each_language
{
	my ($name, $check) = @_;
	PostgreSQL::Test::Utils::append_to_file("$tmp/$name.js", readme_block('js', qr{^// \Q$name\E\.js: }));
	{
		local $ENV{NODE_PATH} = "$src/test/docs/node_modules";
		$check->('node', [ 'node', "$tmp/$name.js" ]);
	}
	mkdir "$tmp/py-$name";
	PostgreSQL::Test::Utils::append_to_file("$tmp/py-$name/$name.py",
		readme_block('python', qr{^# \Q$name\E\.py: }));
	$check->('python', sub { exec '/usr/bin/python3', '-m', 'flask', '--app', $name, 'run', '--port', $ENV{PORT} },
		cwd => "$tmp/py-$name");
	mkdir "$gopath/src/$name";
	PostgreSQL::Test::Utils::append_to_file("$gopath/src/$name/$name.go", readme_block('go', qr{^// \Q$name\E\.go: }));
	{
		local %ENV = (%ENV, GO111MODULE => 'off', GOPATH => "$gopath:/usr/share/gocode",
			GOPROXY => 'off', GOFLAGS => '', GOCACHE => "$tmp/gocache", HOME => $tmp);
		my ($out, $err) = ('', '');
		ok(IPC::Run::run([ 'go', 'build', '-o', "$tmp/go-$name", $name ], '>', \$out, '2>', \$err),
			"the Go $name program builds") or diag("$out$err");
	}
	$check->('go', [ "$tmp/go-$name" ]);
}

in_each_language('headers', \&check_headers);

# The sign-in with two limits: a wrong password spends a cell of the
# address's limit and of the account's failures, a right one is refunded on
# the account, a refused attempt spends nothing.
$node->safe_psql('postgres', readme_block('sql', qr/^-- the sign-in's limits/));

# login(PORT, EMAIL, PASSWORD): (status, Retry-After)
sub login
{
	my ($port, $email, $password) = @_;
	my $r = HTTP::Tiny->new(timeout => 60)->post_form("http://127.0.0.1:$port/login",
		{ email => $email, password => $password });
	return ($r->{status}, $r->{headers}{'retry-after'});
}

sub check_signin
{
	my ($name, $cmd, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	local $ENV{DATABASE_URL} = "postgresql://web\@127.0.0.1:@{[ $node->port ]}/postgres?sslmode=disable";
	local $ENV{PORT} = $port;
	$node->safe_psql('postgres', 'DELETE FROM rl_buckets');
	my $app = IPC::Run::start($cmd, init => sub { chdir $opt{cwd} if $opt{cwd} },
		'>', "$dir/app.log", '2>&1');
	ok(wait_for_port($port), "$name sign-in: the app listens") or diag(slurp_file("$dir/app.log"));

	my @ok = map { (login($port, 'bob@example.com', 'right'))[0] } 1 .. 7;
	is("@ok", '200 200 200 200 200 200 200',
		"$name sign-in: seven right passwords in a row, above the failures' burst of 5")
	  or diag(slurp_file("$dir/app.log"));
	my @bad = map { (login($port, 'ada@example.com', 'wrong'))[0] } 1 .. 5;
	is("@bad", '401 401 401 401 401', "$name sign-in: five wrong passwords are checked");
	my ($status, $retry) = login($port, 'ada@example.com', 'right');
	ok($status == 429 && defined $retry && $retry =~ /^\d+$/ && $retry > 0,
		"$name sign-in: then the account is refused, with Retry-After (got $status)");
	is((login($port, 'bob@example.com', 'wrong'))[0], 401, "$name sign-in: another account is not");
	is( $node->safe_psql('postgres',
			q{SELECT remaining FROM rl_take('sign_in_ip', rl_ip_key('127.0.0.1'), 0)}),
		100 - 7 - 5 - 1, "$name sign-in: the address spent a cell per checked attempt, none for the refused one");
	$app->kill_kill;
}

in_each_language('signin', \&check_signin);

$node->stop;
done_testing();
