# The README's section on 1.1 runs as printed: each SQL block in order, and
# each prints the text block that follows it.  The upgrade block runs in a
# database created at 1.0.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = PostgreSQL::Test::Utils::slurp_file("$ENV{RL_SRC}/README.md");
my ($section) = $readme =~ /^(## Policies, several limits and refunds \(1\.1\)\n.*?)^## /ms
  or die "README.md has no section on 1.1\n";
my @blocks;
while ($section =~ /^```(sql|text)\n(.*?)^```$/msg)
{
	if ($1 eq 'sql') { push @blocks, { sql => $2 }; }
	else { $blocks[-1]{want} = $2; }
}
cmp_ok(scalar @blocks, '>=', 7, 'the section has its SQL blocks');

my $node = PostgreSQL::Test::Cluster->new('readme_1_1');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE new');
$node->safe_psql('new', 'CREATE EXTENSION ratelimit');
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', q{CREATE EXTENSION ratelimit VERSION '1.0';
	SELECT rl_take('sign_in', 'ada', 1.0 / 60, 3)});

for my $block (@blocks)
{
	my $db = $block->{sql} =~ /ALTER EXTENSION ratelimit UPDATE/ ? 'old' : 'new';
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-P', 'footer=off',
			'-d', $node->connstr($db), '-f', '-' ],
		'<', \$block->{sql}, '>', \$out, '2>', \$err);
	my ($first) = $block->{sql} =~ /^(?:--.*\n)*(.*)/;
	is($err, '', "runs without an error or warning: $first");
	if (defined $block->{want})
	{
		s/\s+\z//, s/[ \t]+$//mg for $out, $block->{want};
		is($out, $block->{want}, "prints what the README says: $first");
	}
}
is($node->safe_psql('old', 'SELECT count(*) FROM rl_buckets'), '1',
	'the upgraded database kept its bucket');

$node->stop;
done_testing();
