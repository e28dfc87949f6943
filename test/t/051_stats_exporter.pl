# monitoring/postgres_exporter.yaml works with the real Prometheus PostgreSQL
# exporter: started against a cluster on 127.0.0.1 with the file as its
# custom queries, its HTTP endpoint serves the counts of rl_stats, the
# store's fill and the cleanup worker's last run.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('exporter');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
listen_addresses = '127.0.0.1'
ratelimit.cleanup_interval = '1s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies VALUES ('preview', 1.0 / 3600, 1, true);
	SELECT rl_take('api', 'k', 1.0 / 3600, 2, 1) FROM generate_series(1, 3);
	SELECT rl_take('preview', 'k', 1) FROM generate_series(1, 2);
	SELECT rl_take('live', 'k' || i, 1.0 / 3600, 5, 1) FROM generate_series(1, 4) AS i;
});
my $ran = 'f';
for (1 .. 120)
{
	$ran = $node->safe_psql('app', q{SELECT count(*) = 1 FROM rl_cleanup_runs() WHERE database = 'app'});
	last if $ran eq 't';
	usleep(500_000);
}
is($ran, 't', 'the cleanup worker has run in app');

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = sprintf 'postgresql://%s@127.0.0.1:%d/app?sslmode=disable',
	scalar getpwuid($<), $node->port;
my ($out, $err) = ('', '');
my $exporter = IPC::Run::start(
	[ 'prometheus-postgres-exporter', "--web.listen-address=127.0.0.1:$port",
	  "--extend.query-path=$ENV{RL_SRC}/monitoring/postgres_exporter.yaml",
	  '--disable-default-metrics', '--disable-settings-metrics' ],
	'>', \$out, '2>', \$err,
	init => sub { $ENV{DATA_SOURCE_NAME} = $dsn; });

# the metrics page, once it has the file's metrics (at most a minute)
my $metrics = '';
for (1 .. 120)
{
	$metrics = `curl -s --max-time 5 http://127.0.0.1:$port/metrics`;
	last if $metrics =~ /^ratelimit_store_table_buckets/m;
	usleep(500_000);
}
$exporter->kill_kill;
note("metrics served:\n", join("\n", grep { /^ratelimit_/ } split /\n/, $metrics));
like($metrics, qr/^ratelimit_store_table_buckets/m, 'the exporter serves metrics from the file')
  or diag("exporter output:\n$out$err");

sub metric
{
	my ($name, $labels) = @_;
	my ($line) = grep { /^\Q$name\E\{/ && index($_, $labels) >= 0 } split /\n/, $metrics;
	return defined $line ? (split / /, $line)[-1] : undef;
}

is(metric('ratelimit_decisions_allowed_total', 'limiter="api"'), '2', 'allowed of a limiter');
is(metric('ratelimit_decisions_denied_total', 'limiter="api"'), '1', 'denied of a limiter');
is(metric('ratelimit_decisions_shadow_denied_total', 'limiter="preview"'), '1',
	'shadow_denied of a shadow policy');
like($metrics, qr/^ratelimit_decisions_allowed_total\{[^}]*datname="app"[^}]*limiter="live"[^}]*\} 4$/m,
	'labelled by database and limiter');
ok(metric('ratelimit_decisions_since_seconds', 'limiter="api"') > 0, 'since as Unix time');
is(metric('ratelimit_store_table_buckets', 'store="table"'), '6', 'the table store\'s buckets');
is(metric('ratelimit_store_memory_slots', 'store="table"'), '0', 'no memory slots with the table store');
ok(metric('ratelimit_cleanup_last_run_seconds', 'datname="app"') > 0, 'the last cleanup run');
is(metric('ratelimit_cleanup_last_run_deleted', 'datname="app"'), '0', 'and what it deleted');
unlike($metrics, qr/^pg_exporter_last_scrape_error 1/m, 'no query of the file failed');

$node->stop;
done_testing();
