# Three processes with 30 connections in all hammer one key at a slow rate:
# exactly the burst is allowed, and another limiter on the same key keeps its
# own budget.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 60");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE TABLE outcome (limiter text, allowed boolean);
});

# each transaction decides on both limiters for the same key
my $script = PostgreSQL::Test::Utils::tempdir() . '/hammer.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
INSERT INTO outcome SELECT 'sign_in', (rl_take('sign_in', 'ada@example.com', 0.001, 7)).allowed;
INSERT INTO outcome SELECT 'reset', (rl_take('password_reset', 'ada@example.com', 0.001, 7)).allowed;
});

my @runs;
for my $process (1 .. 3)
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-c', '10', '-j', '1', '-t', '40',
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	push @runs, [ $h, \$out, \$err ];
}
for my $run (@runs)
{
	my ($h, $out, $err) = @$run;
	$h->finish;
	is($h->result(0), 0, 'a pgbench process of 10 connections finished')
	  or diag($$err);
	like($$out, qr/number of failed transactions: 0/, 'with no failed transaction');
}

is( $node->safe_psql('postgres',
		"SELECT count(*) FROM outcome WHERE limiter = 'sign_in'"),
	'1200', 'every sign-in decision was made and recorded');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM outcome WHERE limiter = 'sign_in' AND allowed"),
	'7', 'exactly the burst of 7 was allowed across 30 connections');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM outcome WHERE limiter = 'reset' AND allowed"),
	'7', 'another limiter on the same key had its own 7');
is($node->safe_psql('postgres', 'SELECT count(*) FROM rl_buckets'),
	'2', 'two buckets, one per limiter');

$node->stop;
done_testing();
