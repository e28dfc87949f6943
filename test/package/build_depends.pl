#!/usr/bin/perl
# build_depends.pl CONTROL... < PACKAGES: of the installed packages named on
# standard input (the owners of the files a build used), print each that the
# Build-Depends of no CONTROL file covers, and fail if there is one.
#
# A package is covered when Build-Depends names it or a name it provides, or
# build-essential reaches it (Debian's implicit build dependencies), or it is
# a PostgreSQL package that a named PostgreSQL package reaches through
# PostgreSQL packages (postgresql-all brings postgresql-server-dev-all and the
# headers of every supported major): a library of another source must be
# named, even when a PostgreSQL package happens to pull it in.
use strict;
use warnings;
use Dpkg::Control::Info;
use Dpkg::Deps;

my %provides;	# installed package => the names it provides
my %depends;	# installed package => the packages it depends on
for (`dpkg-query -W -f '\${Package}\\t\${db:Status-Abbrev}\\t\${Provides}\\t\${Depends}, \${Pre-Depends}\\n'`)
{
	chomp;
	my ($pkg, $status, $provides, $deps) = split /\t/;
	next unless $status =~ /^.i/;
	$provides{$pkg} = [ map { (split ' ')[0] } grep /\S/, split /,/, $provides ];
	$depends{$pkg} = [ map { /^\s*([^\s:(]+)/ ? $1 : () } grep /\S/, split /[,|]/, $deps ];
}

# reach(FILTER, START...): the installed packages START reaches through
# dependencies on packages that FILTER accepts
sub reach
{
	my ($filter, @todo) = @_;
	my %seen;
	while (defined(my $pkg = shift @todo))
	{
		next if $seen{$pkg}++ || !$depends{$pkg};
		push @todo, grep { $filter->($_) } @{ $depends{$pkg} };
	}
	return keys %seen;
}

my %covered = map { $_ => 1 } reach(sub { 1 }, 'build-essential');
my $failed = 0;
my %wanted = map { $_ => 1 } grep /\S/, map { chomp; s/:.*//r } <STDIN>;
for my $control (@ARGV)
{
	my $source = Dpkg::Control::Info->new($control)->get_source;
	my @named;
	deps_iterate(deps_parse($source->{'Build-Depends'} // ''),
		sub { push @named, $_[0]->{package}; 1 });
	my %names = (%covered, map { $_ => 1 } @named,
		reach(sub { $_[0] =~ /^postgresql-/ }, grep /^postgresql-/, @named));
	for my $pkg (sort keys %wanted)
	{
		next if $names{$pkg} || grep { $names{$_} } @{ $provides{$pkg} // [] };
		print "$control: Build-Depends does not name $pkg\n";
		$failed = 1;
	}
}
exit $failed;
