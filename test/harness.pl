#!/usr/bin/perl
# Runs TAP test sources with TAP::Harness and prints "RESULT <passed> <failed>",
# counting every test; a file that dies, exits non-zero or misses its plan
# counts as one more failure even when none of its tests failed.  Before it,
# a line "FAILED <file>: <what>" names each file that failed, and how.
#
#   harness.pl perl   t/*.pl       Perl TAP tests
#   harness.pl exec   bin/*_test   programs that print TAP
#   harness.pl pgtap  x/*.sql      pgTAP scripts, run with psql (PG* env)
use strict;
use warnings;
use TAP::Harness;

my ($kind, @files) = @ARGV;
die "usage: $0 perl|exec|pgtap FILE...\n" unless $kind && @files;

my %args = (verbosity => -1, color => 0, timer => 1, merge => 1);
if ($kind eq 'exec')
{
	$args{exec} = [];
}
elsif ($kind eq 'pgtap')
{
	$args{sources} = {
		pgTAP => {
			dbname => $ENV{PGDATABASE},
			username => $ENV{PGUSER},
			host => $ENV{PGHOST},
			port => $ENV{PGPORT},
			suffix => '.sql',
		}
	};
}
elsif ($kind ne 'perl')
{
	die "unknown kind $kind\n";
}

my $aggregate = TAP::Harness->new(\%args)->runtests(@files);
my ($passed, $failed) = (0, 0);
for my $file ($aggregate->descriptions)
{
	my ($parser) = $aggregate->parsers($file);
	my $bad = scalar $parser->failed;
	$passed += scalar $parser->passed;
	$failed += $bad;
	if ($bad)
	{
		print "FAILED $file: tests " . join(', ', $parser->failed) . "\n";
	}
	elsif ($parser->has_problems)
	{
		$failed += 1;
		print "FAILED $file: exit " . ($parser->exit // '?')
		  . ', ' . $parser->tests_run . ' of ' . ($parser->tests_planned // '?')
		  . " planned tests run\n";
	}
}
print "RESULT $passed $failed\n";
exit($failed ? 1 : 0);
