# The README's SQL, and its shell lines that run psql or createdb, as printed
# and in reading order, in one database, as a reader runs them: on a cluster
# with Debian's default authentication (peer on the socket, a password over
# TCP), as the role each block names ("-- as a superuser" runs as postgres;
# every other block as web, with the README's connection string).  A line
# that ends in "-- RESULT" must print RESULT (columns separated by " | ");
# a shell command followed by "# RESULT" must print RESULT.  Every setup
# statement is run twice, as a reader who comes back would, and must not
# fail the second time.  A block that says "then restart the server" is
# followed by a restart, after which each setting it sets by ALTER SYSTEM has
# its value, and each it resets its default.  The first block, the
# illustration at the top, runs in a database of its own: it comes before the
# install.  Then the upgrade section's promise: a database still at 1.1,
# served by this library, already refuses the explicit form for a limiter
# with a policy, and the README's check names it.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/docs";
use Docs;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = debian_node('readme');

my $readme = slurp_file("$ENV{RL_SRC}/README.md");
my @blocks;
while ($readme =~ /^```(sql|sh)\n(.*?)^```$/msg)
{
	push @blocks, { lang => $1, text => $2 };
}
my $illustration = shift @blocks;

# the environment of a reader's shell on the server: psql's defaults point
# at this cluster (the README names none), and localhost is this cluster too
local $ENV{PGHOST} = $node->host;
local $ENV{PGPORT} = $node->port;
delete $ENV{PGUSER};
delete $ENV{PGDATABASE};

# run(COMMAND, STDIN): (exit code, stdout, stderr)
sub run
{
	my ($cmd, $in) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run($cmd, '<', \($in // ''), '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return ($? >> 8, $out, $err);
}

my $web = 'postgres://web:change-me@localhost/app';
my ($sql_blocks, $sh_lines) = (0, 0);

# statements of an SQL block: up to a line whose code ends with ";", each
# with the result its line promises
sub statements
{
	my ($block) = @_;
	my (@stmts, $sql);
	for my $line (split /\n/, $block)
	{
		my $code = sql_code($line);
		next if !defined $sql && $code =~ /^\s*$/;
		$sql .= "$line\n";
		if ($code =~ /;\s*$/ && (() = $sql =~ /\$\$/g) % 2 == 0)
		{
			# a query's comment is its result; other statements' are words
			my ($want) = $sql =~ /^\s*SELECT\b/m ? $line =~ /;\s*--\s*(.*)$/ : ();
			push @stmts, [ $sql, $want ];
			undef $sql;
		}
	}
	die "a README block ends inside a statement:\n$block" if defined $sql;
	return @stmts;
}

{
	# the illustration: a decision on a fresh key, as the table shows it
	$node->safe_psql('postgres', 'CREATE DATABASE illustration');
	$node->safe_psql('illustration', 'CREATE EXTENSION ratelimit');
	my ($query, $table) = $illustration->{text} =~ /\A(.*?;)\n(.*)\z/s;
	my ($ret, $out, $err) = run([ 'psql', '-X', '-d', 'illustration', '-P', 'footer=off', '-c', $query ]);
	s/ +$//mg, s/\n+\z// for $out, $table;
	is($out, $table, 'the illustration prints the table shown') or diag($err);
}

for my $block (@blocks)
{
	my ($first) = $block->{text} =~ /^([^\n]*)/;
	if ($block->{lang} eq 'sh')
	{
		# the lines a reader runs as postgres or as web: psql and createdb
		my @lines = split /\n/, $block->{text};
		for my $i (0 .. $#lines)
		{
			my $line = $lines[$i];
			next unless $line =~ /^(?:runuser -u postgres -- )?(?:psql|createdb) /;
			# a line that writes a file of PgBouncer's: 109_readme_apps runs it
			next if $line =~ m{> /etc/};
			(my $cmd = $line) =~ s/^runuser -u postgres -- //;
			my ($want) = ($lines[ $i + 1 ] // '') =~ /^# (\S+)/;
			for my $again (0, 1)
			{
				my ($ret, $out, $err) = run([ 'sh', '-c', $cmd ]);
				# a second CREATE of the same role or database fails, as it
				# would for the reader; the README's next steps must not
				# depend on it failing or not
				next if $again && $cmd =~ /CREATE ROLE|createdb|CREATE EXTENSION/;
				is($ret, 0, 'sh: ' . $cmd . ($again ? ' (again)' : '')) or diag($err);
				is(results_normal($out), results_normal($want), "sh: $cmd prints $want") if defined $want && !$again;
			}
			$sh_lines++;
		}
		next;
	}

	$sql_blocks++;
	my $superuser = $first =~ /^-- as a superuser/;
	my @conn = $superuser ? ('-d', 'app') : ('-d', $web);
	my @stmts = statements($block->{text});
	for my $again (0, 1)
	{
		# one session per block, as when it is pasted into psql; decisions
		# spend, so only setup statements run again
		my @run = grep { !$again || $_->[0] !~ /^\s*(SELECT|LOAD)\b/m } @stmts;
		next unless @run;
		my $script = join '', map { "$_->[0]\\echo ----\n" } @run;
		my ($ret, $out, $err) = run([ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', @conn ], $script);
		is($ret, 0, "sql ($first) runs" . ($again ? ' again' : '')) or diag($err);
		next if $again;
		my @outs = split /^----\n/m, $out, -1;
		for my $i (0 .. $#run)
		{
			my ($sql, $want) = @{ $run[$i] };
			next unless defined $want;
			my ($line1) = $sql =~ /^(?:\s*--[^\n]*\n)*\s*([^\n]*)/;
			is(results_normal($outs[$i] // ''), results_normal($want), "sql ($first): $line1 prints $want");
		}
	}
	if ($first =~ /then restart the server/)
	{
		$node->restart;
		for my $stmt (map { $_->[0] } @stmts)
		{
			if ($stmt =~ /^ALTER SYSTEM SET (\S+) = '?([^';]*)'?;/m)
			{
				is($node->safe_psql('app', "SHOW $1"), $2, "after the restart, $1 is $2");
			}
			elsif ($stmt =~ /^ALTER SYSTEM RESET (\S+);/m)
			{
				is($node->safe_psql('app', "SELECT setting = boot_val FROM pg_settings WHERE name = '$1'"),
					't', "after the restart, $1 is its default");
			}
		}
	}
}
cmp_ok($sql_blocks, '>=', 6, "the README has $sql_blocks SQL blocks after the illustration");
cmp_ok($sh_lines, '>=', 3, "and $sh_lines psql and createdb lines");

# the README's promises of its blocks, checked after them
is($node->safe_psql('app', q{SELECT extname FROM pg_extension WHERE extname = 'ratelimit'}),
	'ratelimit', 'app has the extension');
my ($ret, $out, $err) = run([ 'psql', '-X', '-At', '-d', $web, '-c', 'BEGIN; SELECT rl_take(\'x\', \'y\', 1, 1); COMMIT' ]);
like($err, qr/rl_take cannot run inside a transaction block/,
	'web\'s decisions in a transaction block are refused, as the README sets it');


# the upgrade: the rule of 1.2 comes with the library, before ALTER EXTENSION
$node->safe_psql('postgres', 'CREATE DATABASE at_1_1');
$node->safe_psql('at_1_1', q{CREATE EXTENSION ratelimit VERSION '1.1';
	INSERT INTO rl_policies (limiter, rate, burst) VALUES ('sign_in_ip', 5.0 / 60, 5)});
($ret, $out, $err) = run([ 'psql', '-X', '-At', '-d', 'at_1_1', '-v', 'VERBOSITY=verbose',
	'-c', q{SELECT rl_take('sign_in_ip', 'x', 1, 100)} ]);
like($err, qr/42501:.*has a policy/, 'a database at 1.1 refuses the explicit form for a limiter with a policy');
my $check = doc_block('sql', qr/^-- as a superuser, in each database with the extension: the limiters with a policy/);
($ret, $out, $err) = run([ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', 'at_1_1' ], $check);
is($out, "sign_in_ip\n", "the README's check names it, at 1.1") or diag($err);

$node->stop;
done_testing();
