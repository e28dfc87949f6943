# rl_take_all under concurrency: 30 connections take overlapping sets of 2 to
# 4 keys, in random orders, all at once.  No deadlock and no error; each
# bucket allows at most its burst; and every allowed call spent in each of
# its buckets while every denied one spent in none: with one cell worth
# 11.6 days, a bucket's final tat minus its allowed calls' cells must fall
# inside the run.  In both stores, and in both with half the keys under a
# durable policy (1.3), decided in rl_buckets_durable in the same call.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use Hammer;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The explicit form over one limiter, 'all'; or the policy form over a
# durable limiter for the odd keys and one in the store for the even ones.
my %calls = (
	all => q{
	\set n random(2, 4)
	INSERT INTO outcome
	SELECT k, (rl_take_all(array_fill('all'::text, ARRAY[:n]), k,
						   array_fill(0.000001::float8, ARRAY[:n]), array_fill(100, ARRAY[:n]))).allowed
	FROM (SELECT array_agg(key ORDER BY random()) AS k
		  FROM (SELECT 'k' || i AS key FROM generate_series(1, 6) AS i ORDER BY random() LIMIT :n) s) t;
	},
	durable => q{
	\set n random(2, 4)
	INSERT INTO outcome
	SELECT k, (rl_take_all(l, k)).allowed
	FROM (SELECT array_agg(CASE WHEN i % 2 = 1 THEN 'durable' ELSE 'store' END ORDER BY r) AS l,
				 array_agg('k' || i ORDER BY r) AS k
		  FROM (SELECT i, random() AS r FROM generate_series(1, 6) AS i ORDER BY random() LIMIT :n) s) t;
	});
my %limiter_of = (all => q{'all'}, durable => q{CASE WHEN i % 2 = 1 THEN 'durable' ELSE 'store' END});
my $durable_policies = q{
	INSERT INTO rl_policies (limiter, rate, burst, durable)
	VALUES ('durable', 0.000001, 100, true), ('store', 0.000001, 100, false)};

# In each store; the memory store also with a set almost full of other
# live buckets, so that some keys are decided in rl_buckets.
my $memory = "shared_preload_libraries = 'ratelimit'\nratelimit.store = memory";
for my $case (
	[ 'table', '', undef, 'all' ],
	[ 'memory', $memory, undef, 'all' ],
	[ 'memory_full', "$memory\nratelimit.memory_buckets = 16",
	  q{SELECT count(rl_take('filler', i::text, 0.000001, 1)) FROM generate_series(1, 13) i}, 'all' ],
	[ 'table_durable', '', $durable_policies, 'durable' ],
	[ 'memory_durable', $memory, $durable_policies, 'durable' ])
{
	my ($name, $conf, $before, $call) = @$case;
	my $node = PostgreSQL::Test::Cluster->new("take_all_$name");
	$node->init;
	$node->append_conf('postgresql.conf', "max_connections = 60\n$conf");
	$node->start;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		CREATE TABLE outcome (keys text[], allowed boolean);
		CREATE TABLE run (started timestamptz, ended timestamptz);
		INSERT INTO run VALUES (clock_timestamp(), NULL);
	});
	$node->safe_psql('postgres', $before) if $before;

	# 6 keys of burst 100, one cell per 10^6 s: 600 cells for some 2700 asked
	hammer($node, $calls{$call}, 3, 30);
	$node->safe_psql('postgres', 'UPDATE run SET ended = clock_timestamp()');

	is($node->safe_psql('postgres', 'SELECT count(*) FROM outcome'), '900',
		"$name: every call was decided and recorded");
	is($node->safe_psql('postgres',
			'SELECT bool_or(allowed) AND bool_or(NOT allowed) FROM outcome'),
		't', "$name: some calls were allowed and some denied");

	my $per_key = qq{
	WITH allowed AS (
		SELECT 'k' || i AS key,
			   (SELECT count(*) FROM outcome WHERE allowed AND 'k' || i = ANY (keys)) AS n,
			   (SELECT tat FROM rl_inspect($limiter_of{$call}, 'k' || i)) AS tat
		FROM generate_series(1, 6) AS i
	)
	SELECT key, n, tat, CASE WHEN n = 0 THEN tat IS NULL OR tat <= ended
						ELSE tat - make_interval(secs => n * 1e6) BETWEEN started AND ended END AS ok
	FROM allowed, run ORDER BY key
	};
	my $rows = $node->safe_psql('postgres', $per_key);
	note $rows;
	is($node->safe_psql('postgres', "SELECT count(*) FROM ($per_key) s WHERE n > 100"), '0',
		"$name: no bucket allowed more than its burst of 100");
	is($node->safe_psql('postgres', "SELECT string_agg(key, ',') FROM ($per_key) s WHERE NOT ok"),
		'', "$name: each bucket holds exactly the cells of the calls allowed on it");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM rl_buckets_durable}), '3',
		"$name: the durable keys' buckets, and only theirs, in rl_buckets_durable")
	  if $call eq 'durable';

	$node->stop;
}

done_testing();
