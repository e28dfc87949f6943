# What the tests take from README.md: its fenced blocks, found by their
# language and first line, so that a block that changes in the README changes
# what is tested.
package Readme;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Utils;

our @EXPORT = qw(readme_block);

my $src = $ENV{RL_SRC} or die "RL_SRC is not set\n";

# readme_block(LANG, FIRST_LINE_RE): the one fenced block of LANG whose first
# line matches FIRST_LINE_RE, as printed.
sub readme_block
{
	my ($lang, $first) = @_;
	my $readme = PostgreSQL::Test::Utils::slurp_file("$src/README.md");
	my @found = grep { /\A[^\n]*$first/ } $readme =~ /^```\Q$lang\E\n(.*?)^```$/msg;
	die "README.md has " . scalar(@found) . " $lang blocks starting with $first, not 1\n"
	  unless @found == 1;
	return $found[0];
}

1;
