# The Errors table of docs/reference.md: each row's example, run on a live server (the
# standby row on a hot standby), fails with the row's SQLSTATE and message.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/docs";
use Docs;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('readme_errors');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION ratelimit; CREATE ROLE web');
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('readme_errors_standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

my $page = slurp_file("$ENV{RL_SRC}/docs/reference.md");
my ($table) = $page =~ /^## Errors\n.*?^\| --- .*?\n(.*?)(?:^$|\z)/ms
  or die "docs/reference.md has no table under \"## Errors\"\n";
my $rows = 0;
for my $row (split /\n/, $table)
{
	my ($state, $when, $example, $message) =
	  $row =~ /^\| `(\w{5})` \| (.*?) \| `([^`]+)`(?: on a standby)? \| `(.*)` \|$/
	  or die "cannot read the Errors row: $row\n";
	my $node = $row =~ /` on a standby \|/ ? $standby : $primary;
	# the library is loaded, so that its settings are checked when set
	my ($ret, $out, $err) = $node->psql('postgres', "LOAD 'ratelimit';\n$example",
		extra_params => [ '-v', 'VERBOSITY=verbose', '-v', 'ON_ERROR_STOP=1' ]);
	my ($got) = $err =~ /ERROR:  (\w{5}: [^\n]*)$/m;
	is($got, "$state: $message", "$when: $example");
	$rows++;
}
ok($rows >= 15, "the table has $rows rows");

$standby->stop;
$primary->stop;
done_testing();
