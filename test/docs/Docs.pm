# What the tests take from README.md and docs/*.md: their fenced blocks,
# found by their language and first line, so that a block that changes in a
# page changes what is tested.
package Docs;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Utils;

our @EXPORT = qw(doc_block);

my $src = $ENV{RL_SRC} or die "RL_SRC is not set\n";

# doc_block(LANG, FIRST_LINE_RE): the one fenced block of LANG, in README.md
# and docs/*.md, whose first line matches FIRST_LINE_RE, as printed.
sub doc_block
{
	my ($lang, $first) = @_;
	my $text = join "\n", map { PostgreSQL::Test::Utils::slurp_file($_) }
	  "$src/README.md", sort glob("$src/docs/*.md");
	my @found = grep { /\A[^\n]*$first/ } $text =~ /^```\Q$lang\E\n(.*?)^```$/msg;
	die "the docs have " . scalar(@found) . " $lang blocks starting with $first, not 1\n"
	  unless @found == 1;
	return $found[0];
}

1;
