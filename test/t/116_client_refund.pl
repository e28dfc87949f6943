# The C client's refund and policy lookup: rl_client_refund gives cells back
# as rl_refund does, to the pre-check too, and in memory while the server is
# stopped; a role without EXECUTE on rl_refund gets the server's 42501;
# rl_client_policy answers the policies last read, during the outage too.
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/client";
use ClientTest;
use Test::More;

my $node = client_node('client_refund');
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	INSERT INTO rl_policies (limiter, rate, burst, shadow, lockout, lockout_growth, lockout_max)
	VALUES ('pol', 1.0 / 3600, 4, false, '10 minutes', 2, '1 hour'),
	       ('plain', 0.5, 7, true, NULL, 1, NULL);
});

run_client(build_client('refund'),
	args => [ $node->connstr('postgres'), $node->connstr('postgres') . ' user=app' ],
	steps => {
		stop => sub { $node->stop('fast') },
		start => sub { $node->start },
	});

$node->stop;
done_testing();
