# A call of the memory store that must wait for another transaction holds no
# key lock meanwhile: that transaction may need one next.  An rl_take_all
# over keys a and b waits for an open transaction that is inserting the row
# of a (a spilled from a full memory), or that holds the row lock of a (a
# lives in rl_buckets); that transaction then decides the new key b, which
# takes b's key lock.  Before, the call held the key locks of a and b while
# it waited: a deadlock (40P01).  Every answer is the table store's for the
# same sequence.
use strict;
use warnings;
use Digest::SHA qw(sha256);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# a before b in stored-key order, the order in which the table store locks
# the rows of a call: it decides these sequences without deadlock
sub pair
{
	return sort { sha256("t\0$a") cmp sha256("t\0$b") } @_;
}
my @spilling = pair('a1', 'b1');
my @row_locked = pair('a2', 'b2');

sub take { return qq{SELECT allowed, remaining FROM rl_take('t', '$_[0]', 0.000001, 3)}; }

sub take_all
{
	my @keys = @_;
	my $array = join(',', map { "'$_'" } @keys);
	return qq{SELECT allowed, remaining FROM rl_take_all(ARRAY['t', 't'], ARRAY[$array],
		ARRAY[0.000001, 0.000001]::float8[], ARRAY[3, 3])};
}

# a transaction decides a and stays open; the call over a and b waits for
# it; then that transaction decides b and commits: the answers of the three
# calls, the cells left in a and b after them, and any error
sub race
{
	my ($node, $a, $b) = @_;
	my $tx = $node->background_psql('postgres', on_error_stop => 0);
	$tx->query_safe(q{SET ratelimit.in_transaction = allow});
	my $first = $tx->query_safe('BEGIN; ' . take($a));
	my $all = $node->background_psql('postgres', on_error_stop => 0);
	$all->query_safe(q{SET application_name = 'take_all'; SET ratelimit.in_transaction = allow});
	my $all_out = $all->query_until(qr/taking/, "\\echo taking\n" . take_all($a, $b) . ";\n");
	$node->poll_query_until('postgres', q{SELECT wait_event_type = 'Lock' FROM pg_stat_activity
		WHERE application_name = 'take_all'}) or die 'rl_take_all does not wait for the open transaction';
	my $second = $tx->query(take($b));
	$tx->query('COMMIT');
	$all_out .= $all->query('SELECT 1');
	my ($all_answer) = $all_out =~ /^([tf]\|\d+)$/m;
	my $errors = $tx->{stderr} . $all->{stderr};
	$_->quit for ($tx, $all);
	my $left = $node->safe_psql('postgres', qq{SELECT string_agg(remaining::text, ',' ORDER BY i)
		FROM unnest(ARRAY['$a', '$b']) WITH ORDINALITY u(k, i), rl_take('t', k, 0.000001, 3, 0)});
	return ("$first / $second / " . ($all_answer // "no answer") . " / left $left", $errors);
}

my %answers;
for my $store ('table', 'memory')
{
	my $node = PostgreSQL::Test::Cluster->new("no_deadlock_$store");
	$node->init;
	# 16 slots: one set, full of live fillers, so every new key spills
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = $store
ratelimit.memory_buckets = 16
ratelimit.cleanup_interval = 0
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
	$node->safe_psql('postgres',
		q{SELECT count(rl_take('filler', i::text, 0.000001, 1)) FROM generate_series(1, 16) i});

	my ($a, $b) = @spilling;
	my ($answer, $errors) = race($node, $a, $b);
	$answers{"$store spilling"} = $answer;
	is($errors, '', "$store store: no error while a spills in an open transaction");

	($a, $b) = @row_locked;
	$node->safe_psql('postgres', take($a));
	($answer, $errors) = race($node, $a, $b);
	$answers{"$store row locked"} = $answer;
	is($errors, '', "$store store: no error while a's row is locked by an open transaction");

	if ($store eq 'memory')
	{
		is( $node->safe_psql('postgres', q{SELECT count(*) FROM rl_buckets}), '4',
			'the four keys live in rl_buckets');
	}
	$node->stop;
}

is($answers{'table spilling'}, 't|2 / t|2 / t|1 / left 1,1',
	'the table store decides the call over a being spilled and b');
is($answers{'memory spilling'}, $answers{'table spilling'}, 'the memory store answers the same');
is($answers{'table row locked'}, 't|1 / t|2 / t|0 / left 0,1',
	"the table store decides the call over a whose row is locked and b");
is($answers{'memory row locked'}, $answers{'table row locked'}, 'the memory store answers the same');

done_testing();
