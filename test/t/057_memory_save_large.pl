# The save file is streamed: a store of more than 1 GB is saved and loaded, a file of more than 1 GB is read without failing the start, and one larger than any save is refused unread.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# 20 000 000 slots of 56 bytes: more than the 1 GB a single allocation may take
my $node = PostgreSQL::Test::Cluster->new('memory_save_large');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
ratelimit.memory_buckets = 20000000
ratelimit.cleanup_interval = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $file = $node->data_dir . '/ratelimit_buckets';

sub query { return $node->safe_psql('postgres', shift); }

is(query(q{SELECT memory_slots * 56 > 1024 * 1024 * 1024 FROM rl_store_status()}), 't',
	'the store holds more than 1 GB of slots');
query(q{SELECT rl_take('large', k::text, 0.001, 1) FROM generate_series(1, 300) k});
$node->stop;
ok(-e $file, 'a clean shutdown of a store over 1 GB writes the save file');
ok(!$node->log_contains('invalid memory alloc request size'), 'without a failed allocation');
$node->start;
is(query(q{SELECT memory_used FROM rl_store_status()}), '300', 'and the next start loads its 300 buckets');
is(query(q{SELECT count(*) FILTER (WHERE (rl_take('large', k::text, 0.001, 1)).allowed)
	FROM generate_series(1, 300) k}), '0', 'every budget still spent');

# a valid header claiming 1.5 GB of slots, followed by that many zero bytes
# (a sparse file): read to its end, none placed, refused by its checksum
$node->stop;
my $header_size = 40;
my $good = slurp_file($file);
my $header = substr($good, 0, $header_size);
my $slot_size = unpack('V', substr($header, 24, 4));
my $slots = int(1.5 * 1024 * 1024 * 1024 / $slot_size);
substr($header, 32, 8) = pack('Q<', $slots);
open my $fh, '>:raw', $file or die $!;
print $fh $header;
truncate $fh, $header_size + $slots * $slot_size + 4 or die $!;
close $fh;
cmp_ok(-s $file, '>', 1024 * 1024 * 1024, 'a save file of more than 1 GB');
my $offset = -s $node->logfile;
ok($node->start(fail_ok => 1), 'the server starts with it');
ok($node->log_contains(qr/ignoring the saved buckets in "ratelimit_buckets": its checksum does not match/, $offset),
	'the file is read to its end and refused by its checksum');
is(query(q{SELECT memory_used FROM rl_store_status()}), '0', 'the store starts empty');
ok(!-e $file, 'the file is removed');

# larger than the save of the largest store: refused before it is read
$node->stop;
open $fh, '>:raw', $file or die $!;
print $fh $header;
truncate $fh, 1 + $header_size + (2**30) * $slot_size + 4 or die $!;
close $fh;
$offset = -s $node->logfile;
ok($node->start(fail_ok => 1), 'the server starts with a file larger than any save');
ok($node->log_contains(qr/ignoring the saved buckets in "ratelimit_buckets": it is larger than any save file/, $offset),
	'which it refuses unread');
ok(!-e $file, 'and removes');

$node->stop;
done_testing();
