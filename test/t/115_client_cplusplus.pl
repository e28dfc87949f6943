# The client header in a C++ program: the declarations have C linkage, so
# a program built with g++ links the implementation built as C and calls
# it; a C++ file that defines the implementation is refused with a message.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{RL_SRC};
my $node = client_node('client_cplusplus');
$node->safe_psql('postgres',
	"INSERT INTO rl_policies VALUES ('cxx_policy', 1.0 / 3600, 3, false)");

run_client(build_client("$src/test/client/cplusplus.cpp"),
	args => [ $node->connstr('postgres') ]);

# the implementation is C: as C++ it stops at its #error
my $dir = PostgreSQL::Test::Utils::tempdir();
PostgreSQL::Test::Utils::append_to_file("$dir/implementation.cpp",
	"#define RATELIMIT_CLIENT_IMPLEMENTATION\n#include \"ratelimit_client.h\"\n");
my ($out, $err) = ('', '');
my $built = IPC::Run::run(
	[ 'g++', "-I$src/include", split(' ', `pkg-config --cflags libpq`),
	  '-c', '-o', "$dir/implementation.o", "$dir/implementation.cpp" ],
	'>', \$out, '2>', \$err);
ok(!$built && $err =~ /the implementation of ratelimit_client\.h is C: define RATELIMIT_CLIENT_IMPLEMENTATION in a C file/,
	'the implementation included by a C++ file stops with a message')
  or diag($err);

$node->stop;
done_testing();
