# 1.3's lockouts in the memory store, decided as in rl_buckets: a locked
# key's denials write nothing (not even a changed limit's normalisation), a
# repeat offence within the last lockout's length after it ends grows the
# next one (to the microsecond, up to lockout_max), a key keeps its slot until
# it is forgiven (a full set spills a new key to rl_buckets meanwhile, and
# rl_cleanup keeps it although its tat has passed), rl_take_all is denied by a
# locked key and writes the lockout it starts and nothing else, rl_refund
# keeps the lock and rl_reset forgets it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('memory_lockouts');
$node->init;
# 16 slots: one set, which the slot test fills
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.memory_buckets = 16
ratelimit.cleanup_interval = 0
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policies (limiter, rate, burst, lockout, lockout_growth, lockout_max) VALUES
		('pin', 1.0 / 3600, 2, '10 s', 2, '30 s');
	INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES
		('long', 1000, 1, '1 hour'), ('door', 1.0 / 3600, 1, '1 hour'), ('fast', 1000, 1, '1 hour');
	INSERT INTO rl_policies (limiter, rate, burst) VALUES
		('slow', 1.0 / 86400, 5), ('other', 1.0 / 3600, 5);
});

sub query { return $node->safe_psql('postgres', shift); }

# (allowed, remaining, retry_after) of the policy form at base + offset
sub take_at
{
	my ($limiter, $key, $cost, $base, $offset) = @_;
	return query(qq{SELECT allowed, remaining, retry_after
		FROM rl_take_at('$limiter', '$key', $cost, timestamptz '$base' + interval '$offset')});
}

# (store, lock_until - base, lock_us) of a key
sub lock_of
{
	my ($limiter, $key, $base) = @_;
	return query(qq{SELECT store, lock_until - timestamptz '$base', lock_us
		FROM rl_inspect('$limiter', '$key')});
}

sub inspect
{
	my ($limiter, $key) = @_;
	return query(qq{SELECT * FROM rl_inspect('$limiter', '$key')});
}

# a lockout, its denials, its growth at the microsecond boundary, its cap
my $p = '2020-01-01 00:00:00+00';
for my $key ('k', 'j')
{
	is(take_at('pin', $key, 2, $p, '0'), 't|0|0', "$key spends its burst");
	is(take_at('pin', $key, 1, $p, '1 s'), 'f|0|10', "$key is denied: a lockout of 10 s starts");
	is(lock_of('pin', $key, $p), 'memory|00:00:11|10000000', "$key is locked in memory until 11 s");
}
my $stored = inspect('pin', 'k');
query(q{UPDATE rl_policies SET rate = 2.0 / 3600 WHERE limiter = 'pin'});
is(take_at('pin', 'k', 1, $p, '5 s'), 'f|0|6', 'a locked denial answers the lock');
is(take_at('pin', 'k', 0, $p, '5 s'), 't|0|0', 'a locked peek is allowed with nothing left');
is(inspect('pin', 'k'), $stored, 'neither wrote anything, not even the new rate');
query(q{UPDATE rl_policies SET rate = 1.0 / 3600 WHERE limiter = 'pin'});
is(take_at('pin', 'k', 1, $p, '20.999999 s'), 'f|0|20',
	'offending again 1 us before the last lockout\'s length after its end doubles it');
is(lock_of('pin', 'k', $p), 'memory|00:00:40.999999|20000000', 'and stores it');
is(take_at('pin', 'j', 1, $p, '21 s'), 'f|0|10', 'offending once that length has passed starts afresh');
is(lock_of('pin', 'j', $p), 'memory|00:00:31|10000000', 'and stores it');
is(take_at('pin', 'k', 1, $p, '40.999999 s'), 'f|0|30', 'a third offence grows up to lockout_max');
is(query(q{SELECT rl_cleanup()}), '2', 'once forgiven by the server clock, cleanup frees both keys');

# a locked key keeps its slot until forgiven: memory full of live buckets
# spills a new key until then, and gives it the slot from then on
my $q = '2021-01-01 00:00:00+00';
is(take_at('long', 'locked', 1, $q, '0') . ' ' . take_at('long', 'locked', 1, $q, '0'),
	't|0|0 f|0|3600', 'a key locked for an hour (its tat passes after 1 ms)');
query(qq{SELECT rl_take_at('slow', 'f' || i, 1, timestamptz '$q') FROM generate_series(1, 15) i});
is(query(q{SELECT count(*) FROM generate_series(1, 15) i, rl_inspect('slow', 'f' || i) WHERE store = 'memory'}),
	'15', '15 live buckets of a day fill memory with it');
is(take_at('long', 'early', 1, $q, '2 hours -1 microsecond'), 't|0|0', 'a new key 1 us before the locked one is forgiven');
is(lock_of('long', 'early', $q), 'table||', 'goes to rl_buckets: the locked key keeps its slot');
is(lock_of('long', 'locked', $q), 'memory|01:00:00|3600000000', 'which still holds its lock');
is(take_at('long', 'early', 1, $q, '2 hours -1 microsecond'), 'f|0|3600', 'the spilled key is locked in rl_buckets');
is(lock_of('long', 'early', $q), 'table|02:59:59.999999|3600000000', 'and stores it there');
is(take_at('long', 'late', 1, $q, '2 hours'), 't|0|0', 'a new key once the locked one is forgiven');
is(lock_of('long', 'late', $q), 'memory||', 'takes its slot');
is(inspect('long', 'locked'), '||||', 'and the forgiven key is gone');
query(q{SELECT rl_cleanup()});

# rl_take_all with a locked key, and with the denial that starts a lockout
is(query(q{SELECT allowed, retry_after FROM rl_take('door', 'a')}), 't|0', 'door a is allowed once');
is(query(q{SELECT allowed, retry_after FROM rl_take('door', 'a')}), 'f|3600', 'then locked for an hour');
$stored = inspect('door', 'a');
is(query(q{SELECT allowed, retry_after BETWEEN 3500 AND 3600, limiter
	FROM rl_take_all(ARRAY['other', 'door'], ARRAY['b', 'a'])}), 'f|t|door',
	'rl_take_all over a new key and the locked one is denied by the lock');
is(inspect('door', 'a') . ' ' . inspect('other', 'b'), "$stored ||||", 'and writes nothing');
query(q{SELECT rl_take('door', 'c'), rl_take('door', 'c2'), rl_take('other', 'd')});
my $other_d = inspect('other', 'd');
is(query(q{SELECT allowed, retry_after, limiter FROM rl_take_all(ARRAY['other', 'door'], ARRAY['d', 'c'])}),
	'f|3600|door', 'rl_take_all over keys in memory whose denial starts a lockout');
is(query(q{SELECT store, lock_us FROM rl_inspect('door', 'c')}) . ' ' . inspect('other', 'd'),
	"memory|3600000000 $other_d", 'writes the lockout and nothing else');
is(query(q{SELECT allowed, retry_after, limiter FROM rl_take_all(ARRAY['other', 'door'], ARRAY['d2', 'c2'])}),
	'f|3600|door', 'so does one over a new key');
is(query(q{SELECT store, lock_us FROM rl_inspect('door', 'c2')}) . ' ' . inspect('other', 'd2'),
	"memory|3600000000 ||||", 'which is not stored');

# rl_refund keeps the lock, rl_reset forgets it
my $lock = q{SELECT lock_until, lock_us FROM rl_inspect('door', 'a')};
my $locked = query($lock);
is(query(q{SELECT rl_refund('door', 'a')}), 't', 'a refund gives the locked key its cell back');
is(query($lock), $locked, 'and keeps its lock');
is(query(q{SELECT allowed, retry_after > 3500 FROM rl_take('door', 'a')}), 'f|t', 'which still denies');
is(query(q{SELECT rl_reset('door', 'a')}), 't', 'rl_reset forgets the key');
is(inspect('door', 'a'), '||||', 'lock and all');
is(query(q{SELECT allowed FROM rl_take('door', 'a')}), 't', 'and the key is allowed again');

# cleanup keeps a locked key whose tat has passed
my $at = query(q{SELECT now() - interval '1 minute'});
query(qq{SELECT rl_take_at('fast', 'z', 1, '$at'), rl_take_at('fast', 'z', 1, '$at')});
query(q{SELECT rl_cleanup()});
is(query(q{SELECT store, lock_us FROM rl_inspect('fast', 'z')}), 'memory|3600000000',
	'rl_cleanup keeps a locked key whose tat has passed');

$node->stop;
done_testing();
