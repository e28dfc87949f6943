# hammer($node, SCRIPT, PROCESSES, TRANSACTIONS[, CLIENTS[, USER]]): run a
# pgbench script in that many processes of CLIENTS (10) connections each (as
# USER, or the default role), all at once, and check that each finished
# without a failed transaction.
package Hammer;
use strict;
use warnings;
use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(hammer);

sub hammer
{
	my ($node, $sql, $processes, $transactions, $clients, $user) = @_;
	$clients //= 10;
	my $script = PostgreSQL::Test::Utils::tempdir() . '/hammer.sql';
	PostgreSQL::Test::Utils::append_to_file($script, $sql);
	my @runs;
	for my $process (1 .. $processes)
	{
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start(
			[
				'pgbench', '-n', '-c', $clients, '-j', '1', '-t', $transactions,
				'-f', $script, '-h', $node->host, '-p', $node->port,
				($user ? ('-U', $user) : ()), 'postgres'
			],
			'>', \$out, '2>', \$err);
		push @runs, [ $h, \$out, \$err ];
	}
	for my $run (@runs)
	{
		my ($h, $out, $err) = @$run;
		$h->finish;
		is($h->result(0), 0, "a pgbench process of $clients connections finished")
		  or diag($$err);
		like($$out, qr/number of failed transactions: 0/, 'with no failed transaction');
	}
}

1;
