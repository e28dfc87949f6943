# The Go client's module, and programs that require it, built in module mode
# without a network: Debian's golang-*-dev packages put the modules' sources
# in /usr/share/gocode/src, and a copy of the module's go.mod gains a replace
# line for each, used through -modfile (the checkout's go.mod is left alone).
package GoModules;

use strict;
use warnings;
use Exporter 'import';
use File::Find;
use File::Path;
use IPC::Run;

our @EXPORT = qw(go_offline);

my $gocode = '/usr/share/gocode/src';

sub slurp
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "$file: $!\n";
	local $/;
	return scalar <$fh>;
}

# go_version(): this system's Go as [major, minor], or undef without one
sub go_version
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'go', 'env', 'GOVERSION' ], '>', \$out, '2>', \$err) or return undef;
	my ($major, $minor) = $out =~ /^go(\d+)\.(\d+)/ or return undef;
	return [ $major, $minor ];
}

# debian_modules(): module path => its folder, for every go.mod of Debian's
# Go sources
sub debian_modules
{
	my %dir;
	return \%dir unless -d $gocode;
	find({ wanted => sub {
		return unless $_ eq 'go.mod';
		my ($path) = slurp($File::Find::name) =~ /^module\s+"?([^\s"]+)"?/m or return;
		$dir{$path} //= $File::Find::dir;
	}, follow_fast => 1 }, $gocode);
	return \%dir;
}

# go_offline(MODULE_DIR, TMP): (undef, ENV) where ENV is the environment
# in which the go command builds and tests the module in MODULE_DIR offline;
# or (REASON) when this system cannot: its Go is older than the go line of
# the Go client's go.mod, or Debian's pgx v5 is not installed.
sub go_offline
{
	my ($module_dir, $tmp) = @_;
	my $client_mod = slurp("$ENV{RL_SRC}/clients/go/go.mod");
	my ($need_major, $need_minor) = $client_mod =~ /^go (\d+)\.(\d+)/m
	  or die "clients/go/go.mod has no go line\n";
	my $have = go_version();
	my $modules = debian_modules();
	my @missing;
	push @missing, 'Go ' . ($have ? "$have->[0].$have->[1]" : 'is not installed') .
	  " (it needs Go $need_major.$need_minor or later)"
	  if !$have || $have->[0] < $need_major || ($have->[0] == $need_major && $have->[1] < $need_minor);
	push @missing, 'no pgx v5 (Debian package golang-github-jackc-pgx-v5-dev)'
	  unless $modules->{'github.com/jackc/pgx/v5'};
	return ("the Go client needs a current Go and pgx v5, which this system's Debian does not ship"
		  . ' (Debian 12 has Go 1.19 and pgx v4 only): ' . join('; ', @missing))
	  if @missing;
	my $mod = slurp("$module_dir/go.mod");
	$mod .= "\n// Debian's sources of the modules\n";
	$mod .= "replace $_ => $modules->{$_}\n" for sort keys %$modules;
	# a module some go.mod requires that Debian does not ship (a test
	# dependency of a dependency): the go command reads its go.mod, and
	# builds nothing of it
	my %stubs;
	my %replaced = map { $_ => 1 } $mod =~ /^replace\s+(\S+)/mg;
	for my $dir ($module_dir, values %$modules)
	{
		my $text = slurp("$dir/go.mod");
		$text =~ s{//[^\n]*}{}g;
		my @required = $text =~ /^\s*(?:require\s+)?([\w.-]+\.[\w.-]+\/\S+)\s+v\S+\s*$/mg;
		$stubs{$_} = 1 for grep { !$modules->{$_} && !$replaced{$_} } @required;
	}
	for my $path (sort keys %stubs)
	{
		my $stub = "$tmp/gostub/$path";
		File::Path::make_path($stub);
		open(my $fh, '>', "$stub/go.mod") or die "$stub/go.mod: $!";
		print $fh "module $path\n";
		close $fh;
		$mod .= "replace $path => $stub\n";
	}
	mkdir "$tmp/gomod";
	open(my $fh, '>', "$tmp/gomod/go.mod") or die "$tmp/gomod/go.mod: $!";
	print $fh $mod;
	close $fh;
	return (undef, {
		GO111MODULE => 'on',
		GOFLAGS => "-mod=mod -modfile=$tmp/gomod/go.mod",
		GOPROXY => 'off',
		GOWORK => 'off',
		GOTOOLCHAIN => 'local',
		GOCACHE => "$tmp/gocache",
		GOPATH => "$tmp/gopath" });
}

1;
