# What the tests take from README.md and docs/*.md: their fenced blocks,
# found by their language and first line, so that a block that changes in a
# page changes what is tested.
package Docs;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(doc_block debian_node sql_code results_normal);

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

# debian_node(NAME, CONF LINE...): a started cluster configured as Debian's
# pg_createcluster makes one: peer authentication on the socket, a password
# (SCRAM) over TCP on localhost, the library preloaded as the README says.
sub debian_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		join("\n", "shared_preload_libraries = 'ratelimit'", "listen_addresses = 'localhost'", @conf, ''));
	# Debian's pg_hba.conf, less the replication lines
	open my $hba, '>', $node->data_dir . '/pg_hba.conf' or die $!;
	print $hba <<'HBA';
local   all             postgres                                peer
local   all             all                                     peer
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
HBA
	close $hba;
	$node->start;
	return $node;
}

# sql_code(LINE): the code of an SQL line, without its comment (a -- outside
# quotes)
sub sql_code
{
	my ($line) = @_;
	my $quoted = 0;
	for my $i (0 .. length($line) - 2)
	{
		my $c = substr($line, $i, 1);
		$quoted = !$quoted if $c eq "'";
		return substr($line, 0, $i) if !$quoted && substr($line, $i, 2) eq '--';
	}
	return $line;
}

# results_normal(TEXT): query results as a page writes them, "a | b", and as
# psql -A prints them, "a|b", made alike
sub results_normal
{
	my ($s) = @_;
	$s =~ s/\s*\|\s*/|/g;
	$s =~ s/^\s+|\s+$//g;
	return $s;
}

1;
