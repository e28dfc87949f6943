#!/usr/bin/perl
# Runs TAP test sources with TAP::Harness and prints "RESULT <passed> <failed>",
# counting every test; a file that dies, exits non-zero or misses its plan
# counts as one more failure even when none of its tests failed.  Before it,
# a line "FAILED <file>: <what>" names each file that failed, and how, after
# what that file printed (its diagnostics, its failed tests, its standard
# error; all but its passing tests), which the quiet harness does not show.
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

# the lines each file printed, but its passing tests
my %output;
my $harness = TAP::Harness->new(\%args);
$harness->callback(
	made_parser => sub {
		my ($parser, $job) = @_;
		my $lines = $output{ $job->[0] } = [];
		$parser->callback(
			ALL => sub {
				my ($result) = @_;
				push @$lines, $result->raw
				  unless ($result->is_test && $result->is_ok)
				  || $result->is_plan
				  || $result->is_version;
			});
	});

# show FILE's lines, the last 400 of them
sub show_output
{
	my ($file) = @_;
	my @lines = @{ $output{$file} // [] };
	my $left_out = @lines > 400 ? @lines - 400 : 0;
	print "--- $file printed"
	  . ($left_out ? " ($left_out earlier lines left out)" : '') . ":\n";
	print "    $_\n" for @lines[ $left_out .. $#lines ];
}

my $aggregate = $harness->runtests(@files);
my ($passed, $failed) = (0, 0);
for my $file ($aggregate->descriptions)
{
	my ($parser) = $aggregate->parsers($file);
	my $bad = scalar $parser->failed;
	$passed += scalar $parser->passed;
	$failed += $bad;
	show_output($file) if $bad || $parser->has_problems;
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
