# HTTP: every rl_headers value parses as the structured-fields List the
# RateLimit draft requires (the npm package structured-headers, from
# test/docs), and PostgREST's way of calling rl_guard: a transaction (READ
# ONLY for GET and HEAD) that sets request.headers, request.method and
# request.path, runs the pre-request function, then the query.  With the
# memory store GET and HEAD are limited too; with the table store a read-only
# transaction cannot decide (25006).
use strict;
use warnings;
use lib "$ENV{RL_SRC}/test/docs";
use IPC::Run;
use Docs;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{RL_SRC};

# the README's PostgREST recipe, with its policy lowered to 3 an hour
my $setup = q{
	CREATE EXTENSION ratelimit;
	CREATE ROLE authenticator;
	CREATE SCHEMA api;
	CREATE TABLE api.items (id int);
	INSERT INTO api.items VALUES (1);
} . doc_block('sql', qr/^-- PostgREST: /) . q{
	UPDATE rl_policies SET rate = 1.0 / 3600, burst = 3 WHERE limiter = 'api_requests';
};

# request(NODE, METHOD, X-FORWARDED-FOR): (stdout, stderr) of one request as
# PostgREST runs it
sub request
{
	my ($node, $method, $xff) = @_;
	my $ro = $method eq 'GET' || $method eq 'HEAD' ? ' READ ONLY' : '';
	my $headers = qq({"x-forwarded-for": "$xff", "accept": "*/*"});
	my ($out, $err) = ('', '');
	$node->psql('postgres', qq{
		BEGIN ISOLATION LEVEL READ COMMITTED$ro;
		SELECT set_config('request.headers', '$headers', true),
			   set_config('request.method', '$method', true),
			   set_config('request.path', '/items', true) \\g /dev/null
		SELECT api.pre_request() \\g /dev/null
		SELECT count(*) FROM api.items;
		COMMIT;
	}, stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

# the status of a request: 200, 429 with its JSON, or the SQLSTATE
sub status
{
	my ($out, $err) = @_;
	return '200' if $out eq '1' && $err !~ /ERROR/;
	return $1 if $err =~ /ERROR:\s+(\w{5}):/;
	return "?? $out $err";
}

# --- the memory store
my $mem = PostgreSQL::Test::Cluster->new('http_memory');
$mem->init;
$mem->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.store = memory
});
$mem->start;
$mem->safe_psql('postgres', $setup);

my $forged = 0;
my @s = map { $forged++; status(request($mem, $_, "198.51.100.$forged, 203.0.113.7")) }
  qw(GET HEAD GET);
is("@s", '200 200 200', 'memory store: GET and HEAD in read-only transactions are decided');
my ($out, $err) = request($mem, 'GET', '198.51.100.99, 203.0.113.7');
is(status($out, $err), 'PGRST', 'the fourth GET, with a new forged entry, is denied with PGRST');
my ($message) = $err =~ /ERROR:\s+PGRST:\s+(\{.*\})$/m;
my ($detail) = $err =~ /^DETAIL:\s+(\{.*\})$/m;
like($message, qr/\A\{"code" : "RL429", "message" : "Too Many Requests", /,
	'the message is the JSON body PostgREST answers') or diag($err);
like($detail,
	qr/\A\{"status" : 429, "headers" : \{"RateLimit": "\\"api_requests\\";r=0;t=(\d+)", "Retry-After": "\1", "RateLimit-Policy": "\\"api_requests\\";q=3;w=10800"\}\}\z/,
	'the detail: status 429, Retry-After and the RateLimit fields') or diag($err);
my ($retry) = $detail =~ /"Retry-After": "(\d+)"/;
ok($retry >= 3500 && $retry <= 3600, "Retry-After is about an hour ($retry)");
is(status(request($mem, 'HEAD', '203.0.113.7')), 'PGRST', 'so is a HEAD without the forged entry');
is(status(request($mem, 'POST', '203.0.113.7')), 'PGRST', 'and a POST from the same client');
is(status(request($mem, 'GET', '203.0.113.7, 203.0.113.8')), '200',
	'another client is allowed');
is(status(request($mem, 'GET', '')), '22004',
	'a request without the header has no client: the key is NULL, an error');
$mem->stop;

# --- the table store
my $tab = PostgreSQL::Test::Cluster->new('http_table');
$tab->init;
$tab->append_conf('postgresql.conf', 'ratelimit.in_transaction = allow');
$tab->start;
$tab->safe_psql('postgres', $setup);
is(status(request($tab, 'GET', '203.0.113.7')), '25006',
	'table store: a read-only transaction cannot decide');
@s = map { status(request($tab, $_, '198.51.100.1, 203.0.113.7')) } qw(POST PATCH DELETE POST);
is("@s", '200 200 200 PGRST', 'writes are decided: three allowed, the fourth denied');

# --- every value parses as a structured-fields List of one Item
my $values = $tab->safe_psql('postgres', q{
	SELECT json_build_object('limiter', n, 'rate', r, 'burst', b, 'allowed', (d).allowed,
							 'headers', rl_headers(d, n, r, b))
	FROM (SELECT n, r, b, rl_take_at(n, 'k', r, b, c, '2030-01-01 00:00:00+00'::timestamptz + s * interval '1 s') AS d
		  FROM unnest(ARRAY['api', 'a"b\c', ' ~!#', '\\', '"']) WITH ORDINALITY AS n(n, i),
			   unnest('{0.001,0.3,1,3,10,1000,100000}'::float8[]) r,
			   unnest('{1,2,10,1000}'::int[]) b,
			   unnest('{0,1,2,5,2000}'::int[]) c,
			   unnest('{0,0.5,7,1e5}'::float8[]) s
		  ORDER BY i, r, b, s, c) AS decisions
});
my $check = q{
const sh = require('structured-headers');
const lines = require('fs').readFileSync(0, 'utf8').trim().split('\n');
let bad = [], denials = 0;
function one(value, limiter, keys) {
	const list = sh.parseList(value);
	if (list.length !== 1) throw new Error('not one item');
	const [item, params] = list[0];
	if (item !== limiter) throw new Error('item is not the limiter');
	if (sh.serializeList(list) !== value) throw new Error('not canonical');
	const got = [...params.keys()].join(',');
	if (!keys.includes(got)) throw new Error('parameters ' + got);
	for (const v of params.values())
		if (!Number.isInteger(v) || v < 0) throw new Error('parameter ' + v);
	return params;
}
for (const line of lines) {
	const row = JSON.parse(line), h = row.headers;
	try {
		const names = Object.keys(h).sort().join(',');
		if (names !== 'RateLimit,RateLimit-Policy' && names !== 'RateLimit,RateLimit-Policy,Retry-After')
			throw new Error('fields ' + names);
		const p = one(h['RateLimit-Policy'], row.limiter, ['q,w']);
		if (p.get('q') !== row.burst || p.get('w') < 1) throw new Error('q or w');
		const r = one(h['RateLimit'], row.limiter, ['r', 'r,t']);
		if (r.has('t') && r.get('t') < 1) throw new Error('t');
		if ('Retry-After' in h) {
			if (row.allowed) throw new Error('Retry-After when allowed');
			denials++;
			const [ra, rap] = sh.parseItem(h['Retry-After']);
			if (!Number.isInteger(ra) || rap.size || String(ra) !== h['Retry-After'])
				throw new Error('Retry-After');
			if (ra < (r.get('t') ?? 0)) throw new Error('Retry-After before t');
		}
	} catch (e) { bad.push(e.message + ': ' + line); }
}
console.log(lines.length + ' ' + denials);
for (const b of bad.slice(0, 5)) console.log(b);
};
my ($nout, $nerr) = ('', '');
{
	local $ENV{NODE_PATH} = "$src/test/docs/node_modules";
	IPC::Run::run([ 'node', '-e', $check ], '<', \$values, '>', \$nout, '2>', \$nerr);
}
my ($count, $denials) = $nout =~ /\A(\d+) (\d+)\n/;
is($count, 5 * 7 * 4 * 5 * 4, 'structured-headers read every value') or diag("$nout$nerr");
ok($denials > 100, "with denials among them ($denials)");
is($nout =~ s/\A\d+ \d+\n//r, '', 'every value is a List of one Item, the limiter, with its parameters');

# the parser refuses what rl_headers refuses to write
$nout = '';
IPC::Run::run([ 'node', '-e', q{
	const sh = require('structured-headers');
	try { sh.parseList('"caf\u00e9";q=1;w=1'); console.log('parsed'); } catch (e) { console.log('refused'); }
} ], '>', \$nout, '2>', \$nerr, init => sub { $ENV{NODE_PATH} = "$src/test/docs/node_modules" });
is($nout, "refused\n", 'a name that is not ASCII is no sf-string: rl_headers refuses it (22023)');

$tab->stop;
done_testing();
