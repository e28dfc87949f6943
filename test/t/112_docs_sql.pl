# Every SQL block of docs/*.md, run as printed on a live server, each in a
# database of its own (with the extension, or without it for the blocks that
# create it).  A SELECT whose line ends in "-- RESULT" must print RESULT
# (columns separated by " | "; "A, then B" when run twice); a block that
# shows psql's table prints that table; statements with $1, $2 are prepared
# and run with sample addresses.  The switch to the memory store also runs on
# a server that does not preload the library yet, and takes effect at its
# restart.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/docs";
use Docs;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('readme_sql');
$node->init;
$node->append_conf('postgresql.conf', <<'CONF');
shared_preload_libraries = 'ratelimit, pg_cron'
cron.database_name = 'postgres'
CONF
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_cron;
	CREATE ROLE web LOGIN;
	CREATE DATABASE app;
});

# What a block needs before it runs, by a pattern of its text: the default
# is a database with the extension.
my @setups = (
	[ qr/^CREATE EXTENSION ratelimit;/m => undef ],
	[ qr/^ALTER EXTENSION ratelimit UPDATE/m => q{CREATE EXTENSION ratelimit VERSION '1.0'} ],
	[ qr/^SELECT rl_reset\('auth_login', 'ada\@example\.com'\)/m =>
		  q{CREATE EXTENSION ratelimit; SELECT rl_take('auth_login', 'ada@example.com', 1, 1)} ],
	[ qr/^SELECT rl_cleanup\(\);   -- 1523$/m =>
		  q{CREATE EXTENSION ratelimit;
			SELECT count(rl_take_at('export', i::text, 1, 1, 1, now() - interval '1 hour'))
			FROM generate_series(1, 1523) i} ],
	[ qr/^CREATE UNLOGGED TABLE rl_buckets/m =>
		  q{CREATE EXTENSION ratelimit; CREATE SCHEMA readme; SET search_path = readme} ],
	[ qr/^CREATE FUNCTION api\.pre_request/m =>
		  q{CREATE EXTENSION ratelimit; CREATE SCHEMA api;
			DO $$BEGIN CREATE ROLE authenticator; EXCEPTION WHEN duplicate_object THEN END$$} ],
	[ qr/cron\.schedule/ => 'postgres' ],
	# a proxy database has ratelimit_proxy instead of ratelimit; its roles
	# are the shard's of the block before, on one cluster here
	[ qr/^CREATE EXTENSION ratelimit_proxy/m => 'DROP ROLE app' ],
	[ qr/rl_shard_hash|^CREATE SERVER ratelimit/m => 'CREATE EXTENSION ratelimit_proxy CASCADE' ],
	# the SQL edition's page: its blocks run where it is installed, as a
	# reader of that page has it
	[ qr/^INSERT INTO rl_settings|^CREATE SCHEMA ratelimit_c;/m =>
		  "\\i $ENV{RL_SRC}/managed/ratelimit_sql--1.3.sql" ],
	[ qr/./ => 'CREATE EXTENSION ratelimit' ]);

# the docs' pages, in name order; the policies page is one story, block
# after block, that 042_docs_policies.pl runs in order
my $docs = join "\n", map { slurp_file($_) }
  grep { !m{/policies\.md$} } sort glob("$ENV{RL_SRC}/docs/*.md");
my @blocks = $docs =~ /^```sql\n(.*?)^```$/msg;
my ($n, $checked) = (0, 0);
for my $block (@blocks)
{
	$n++;
	my ($first) = $block =~ /^([^\n]*)/;
	my ($setup) = map { $_->[1] } grep { $block =~ $_->[0] } @setups;
	my $db = 'postgres';
	my $prefix = '';
	# a block that says whose session it is runs as that role
	my @as = $first =~ /^-- as (\w+), / ? ('-U', $1) : ();
	# the secret file a block names, readable by the server's user only
	if ($block =~ /ratelimit\.key_secret_file = '(.*?)'/)
	{
		PostgreSQL::Test::Utils::append_to_file($1, 'a secret');
		chmod 0600, $1;
	}
	if (!defined $setup || $setup ne 'postgres')
	{
		$db = "block$n";
		$node->safe_psql('postgres', "CREATE DATABASE $db");
		if (defined $setup && $setup =~ /SET search_path/)
		{
			($setup, $prefix) = split /;\s*(?=SET search_path)/, $setup;
			$prefix .= ";\n";
		}
		$node->safe_psql($db, $setup) if defined $setup;
	}

	# statements: up to a line whose code ends with ";"; a psql table after
	# one is its output
	my (@stmts, $sql, $table);
	for my $line (split /\n/, $block)
	{
		if (defined $table || $line =~ /^ \w+ +\|/ && !defined $sql)
		{
			$table .= "$line\n";
			next;
		}
		my $code = sql_code($line);
		next if !defined $sql && $code =~ /^\s*$/;
		$sql .= "$line\n";
		# a statement ends at a ";" outside a dollar-quoted body
		if ($code =~ /;\s*$/ && (() = $sql =~ /\$\$/g) % 2 == 0)
		{
			my ($want) = $line =~ /;\s*--\s*(.*)$/;
			push @stmts, [ $sql, $want ];
			undef $sql;
		}
	}
	die "block $n ($first) ends inside a statement\n" if defined $sql;

	for my $i (0 .. $#stmts)
	{
		my ($stmt, $want) = @{ $stmts[$i] };
		my $name = "block $n ($first): " . (split /\n/, $stmt)[0];
		if ($stmt =~ /\$\d/)
		{
			my %params = map { $_ => 1 } $stmt =~ /\$(\d)/g;
			my @args = ('10.0.0.1', '203.0.113.7')[ 0 .. (keys %params) - 1 ];
			(my $body = code_only($stmt)) =~ s/;\s*$//;
			$stmt = "PREPARE s AS $body;\nEXECUTE s(" . join(', ', map { "'$_'" } @args) . ");\n";
		}
		my @runs = (defined $want && $stmt =~ /^\s*SELECT/i)
		  ? split(/, then /, $want) : (undef);
		if (defined $table && $i == $#stmts)
		{
			my ($ret, $out, $err) = $node->psql($db, $prefix . $stmt, extra_params =>
				  [ @as, '-P', 'format=aligned', '-P', 'tuples_only=off', '-P', 'footer=off' ]);
			s/ +$//mg for $out, $table;
			s/\n+\z// for $out, $table;
			is($out, $table, "$name prints the table shown") or diag($err);
			$checked++;
			next;
		}
		for my $expect (@runs)
		{
			my ($ret, $out, $err) = $node->psql($db, $prefix . $stmt,
				extra_params => [ @as, '-v', 'ON_ERROR_STOP=1' ]);
			is($ret, 0, "$name runs") or diag($err);
			next unless defined $expect;
			is(results_normal($out), results_normal($expect), "$name prints $expect");
			$checked++;
		}
	}

	if ($block =~ /ratelimit\.key_secret_file = '(.*?)'/)
	{
		my $file = $1;
		$node->safe_psql('postgres',
			'ALTER SYSTEM RESET ratelimit.key_secret_file; SELECT pg_reload_conf()');
		unlink $file;
	}

	if ($first =~ /^-- what CREATE EXTENSION makes/)
	{
		my $columns = q{
			SELECT string_agg(format('%s %s %s', a.attname, format_type(a.atttypid, a.atttypmod),
			                         a.attnotnull), ', ' ORDER BY a.attnum)
			       || ' / ' || (SELECT string_agg(pg_get_constraintdef(c.oid), ', ' ORDER BY 1)
			                    FROM pg_constraint c WHERE c.conrelid = '%1$s'::regclass)
			       || ' / ' || (SELECT relpersistence::text FROM pg_class WHERE oid = '%1$s'::regclass)
			FROM pg_attribute a WHERE a.attrelid = '%1$s'::regclass AND a.attnum > 0};
		my ($theirs, $ours) = map {
			(my $q = $columns) =~ s/%1\$s/$_/g;
			$node->safe_psql($db, $q)
		} ('public.rl_buckets', 'readme.rl_buckets');
		is($ours, $theirs, "block $n: the table printed is the extension's ($theirs)");
		$checked++;
	}
}
ok($n >= 15, "the docs have $n SQL blocks");

# The Python computation of a key's partition agrees with the proxy's.
my ($python) = grep { /^partition = /m } $docs =~ /^```python\n(.*?)^```$/msg;
ok(defined $python, 'docs/proxy.md computes a partition in Python');
my $script = PostgreSQL::Test::Utils::tempdir() . '/partition.py';
PostgreSQL::Test::Utils::append_to_file($script, $python . "print(partition)\n");
my ($stdout, $stderr) = run_command([ 'python3', $script ]);
$node->safe_psql('postgres', 'CREATE DATABASE partition');
$node->safe_psql('partition', 'CREATE EXTENSION ratelimit_proxy CASCADE');
is( $stdout,
	$node->safe_psql('partition', q{SELECT rl_shard_hash('auth_login', 'ada@example.com') % 2}),
	'the Python of docs/proxy.md names the partition the proxy routes to');
note("$checked results checked");

# The stores page's switch, as printed, on a server that does not preload
# the library yet: it runs, and after the restart the store is memory.
my $fresh = PostgreSQL::Test::Cluster->new('stores_switch');
$fresh->init;
$fresh->start;
my $switch = doc_block('sql', qr/^-- as a superuser, then restart the server\n(?:[^\n]*\n)?ALTER SYSTEM SET shared_preload_libraries/);
my ($ret, $out, $err) = $fresh->psql('postgres', $switch, extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($ret, 0, 'the switch to the memory store of docs/stores.md runs without the library preloaded') or diag($err);
$fresh->restart;
is($fresh->safe_psql('postgres', 'SHOW ratelimit.store'), 'memory', 'and after the restart the store is memory');
$fresh->stop;

sub code_only { join("\n", map { sql_code($_) } split /\n/, $_[0]) . "\n" }

$node->stop;
done_testing();
