# docs/policies.md runs as printed: each SQL block in order, and each prints
# the text block that follows it, or the result its "-- RESULT" comments
# give.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $page = PostgreSQL::Test::Utils::slurp_file("$ENV{RL_SRC}/docs/policies.md");
my ($section) = $page =~ /^(## Policies, several limits and refunds\n.*)/ms
  or die "docs/policies.md has no section on policies\n";
my @blocks;
while ($section =~ /^```(sql|text)\n(.*?)^```$/msg)
{
	if ($1 eq 'sql') { push @blocks, { sql => $2 }; }
	else { $blocks[-1]{want} = $2; }
}
cmp_ok(scalar @blocks, '>=', 6, 'the section has its SQL blocks');

my $node = PostgreSQL::Test::Cluster->new('readme_1_1');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE new');
$node->safe_psql('new', 'CREATE EXTENSION ratelimit; CREATE ROLE web');

for my $block (@blocks)
{
	my $db = 'new';
	my ($out, $err) = ('', '');
	# without a text block, the results of its "SELECT ...;  -- RESULT" lines
	my @results = defined $block->{want} ? () : $block->{sql} =~ /^SELECT\b.*?;\s*--\s*(.*?)\s*$/msg;
	$block->{want} = join("\n", @results) if @results;
	IPC::Run::run([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-P', 'footer=off',
			(@results ? ('-A', '-t', '-F', ' | ') : ()),
			'-d', $node->connstr($db), '-f', '-' ],
		'<', \$block->{sql}, '>', \$out, '2>', \$err);
	my ($first) = $block->{sql} =~ /^(?:--.*\n)*(.*)/;
	is($err, '', "runs without an error or warning: $first");
	if (defined $block->{want})
	{
		s/\s+\z//, s/[ \t]+$//mg for $out, $block->{want};
		is($out, $block->{want}, "prints what the page says: $first");
	}
}

$node->stop;
done_testing();
