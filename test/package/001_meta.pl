#!/usr/bin/perl
# META.json holds to the PGXN Meta Spec 1.0.0, and one version number runs
# through the release: ratelimit.control's default_version (1.1, released as
# 1.1.0, the three-part form PGXN requires) is the version of META.json, of
# every extension it provides, of debian/changelog and of the dist archive.
use strict;
use warnings;
use Cwd 'abs_path';
use FindBin;
use JSON::PP;
use Test::More;

# the checkout: git tells which of its files the distribution holds
my $src = abs_path("$FindBin::Bin/../..");

sub slurp
{
	my ($path) = @_;
	open(my $fh, '<', $path) or die "$path: $!\n";
	local $/;
	return scalar <$fh>;
}

# in_tree(PATH): a file of the distribution (present, not ignored by git)
sub in_tree
{
	my ($path) = @_;
	return 0 if $path =~ m{^/|(^|/)\.\.(/|$)} || !-f "$src/$path";
	return system('git', '-C', $src, 'check-ignore', '-q', $path) != 0;
}

# release(DEFAULT_VERSION): 1.1 -> 1.1.0
sub release
{
	my @part = split /\./, shift;
	push @part, 0 while @part < 3;
	return join '.', @part;
}

my %controls;    # extension name => release version of its control file
for my $control (split /\n/, `git -C $src ls-files --cached --others --exclude-standard '*.control'`)
{
	my ($name) = $control =~ m{([^/]+)\.control$};
	my ($v) = slurp("$src/$control") =~ /^default_version\s*=\s*'([^']+)'/m;
	$controls{$name} = release($v // 'none');
}
ok(exists $controls{ratelimit}, 'ratelimit.control gives a default_version')
  or BAIL_OUT('no ratelimit.control');
my $version = $controls{ratelimit};

my $meta = eval { JSON::PP->new->decode(slurp("$src/META.json")) };
ok(ref $meta eq 'HASH', 'META.json is a valid JSON object') or diag($@);
$meta = {} unless ref $meta eq 'HASH';

# The types of the spec.
my $semver = qr/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$/;
sub is_string { my $v = shift; defined $v && !ref $v && length $v }
sub is_term { my $v = shift; is_string($v) && length $v >= 2 && $v !~ m{[/\\\s[:cntrl:]]} }
sub is_tag { my $v = shift; is_string($v) && length $v < 256 && $v !~ m{[/\\[:cntrl:]]} }
sub is_uri { my $v = shift; is_string($v) && $v =~ m{^[a-z][a-z0-9+.-]*:\S+$}i }
sub as_list { my $v = shift; ref $v eq 'ARRAY' ? @$v : ($v) }
sub custom { shift =~ /^x_/i }

# a Version Range: 0, a version, or operator-version clauses joined by commas
sub is_range
{
	my $v = shift;
	return 1 if defined $v && !ref $v && $v eq '0';
	return 0 unless is_string($v);
	for my $clause (split /\s*,\s*/, $v)
	{
		return 0 unless $clause =~ /^(?:(?:<|<=|>|>=|==|!=)\s*)?(\S+)$/ && $1 =~ $semver;
	}
	return 1;
}

# satisfies(VERSION, RANGE): whether VERSION is in RANGE
sub cmp_version
{
	my @a = split /\./, shift;
	my @b = split /\./, shift;
	return $a[0] <=> $b[0] || $a[1] <=> $b[1] || $a[2] <=> $b[2];
}
sub satisfies
{
	my ($version, $range) = @_;
	return 1 if $range eq '0';
	for my $clause (split /\s*,\s*/, $range)
	{
		my ($op, $v) = $clause =~ /^(<|<=|>|>=|==|!=)?\s*(\S+)$/;
		my $c = cmp_version($version, $v);
		my %holds = ('' => $c >= 0, '<' => $c < 0, '<=' => $c <= 0, '>' => $c > 0,
			'>=' => $c >= 0, '==' => $c == 0, '!=' => $c != 0);
		return 0 unless $holds{ $op // '' };
	}
	return 1;
}

my %licenses = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2
  bsd freebsd gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0 mit mozilla_1_0
  mozilla_1_1 openssl perl_5 postgresql qpl_1_0 ssleay sun zlib open_source
  restricted unrestricted unknown);

# Every key of the spec, and what its value must be.
my %field = (
	name => \&is_term,
	abstract => \&is_string,
	version => sub { is_string($_[0]) && $_[0] =~ $semver },
	maintainer => sub { my @m = as_list($_[0]); @m && !grep { !is_string($_) } @m },
	license => sub {
		my $l = shift;
		return %$l && !grep { !is_uri($l->{$_}) } keys %$l if ref $l eq 'HASH';
		my @l = as_list($l);
		return @l && !grep { !is_string($_) || !$licenses{$_} } @l;
	},
	provides => sub {
		my $p = shift;
		return 0 unless ref $p eq 'HASH' && %$p;
		for my $name (keys %$p)
		{
			my $e = $p->{$name};
			return 0 unless is_term($name) && ref $e eq 'HASH';
			return 0 unless is_string($e->{file}) && is_string($e->{version})
			  && $e->{version} =~ $semver;
			return 0 if grep { !/^(file|version|abstract|docfile)$/ && !custom($_) } keys %$e;
			return 0 if exists $e->{abstract} && !is_string($e->{abstract});
			return 0 if exists $e->{docfile} && !is_string($e->{docfile});
		}
		return 1;
	},
	'meta-spec' => sub {
		my $m = shift;
		return ref $m eq 'HASH' && is_string($m->{version}) && $m->{version} =~ /^1\.0\.\d+$/
		  && (!exists $m->{url} || is_uri($m->{url}))
		  && !grep { !/^(version|url)$/ && !custom($_) } keys %$m;
	},
	description => \&is_string,
	generated_by => \&is_string,
	tags => sub { my @t = as_list($_[0]); !grep { !is_tag($_) } @t },
	no_index => sub {
		my $n = shift;
		return ref $n eq 'HASH' && !grep {
			!(/^(file|directory)$/ || custom($_)) || grep { !is_string($_) } as_list($n->{$_})
		} keys %$n;
	},
	prereqs => sub {
		my $p = shift;
		return 0 unless ref $p eq 'HASH';
		for my $phase (keys %$p)
		{
			next if custom($phase);
			return 0 unless $phase =~ /^(configure|build|test|runtime|develop)$/
			  && ref $p->{$phase} eq 'HASH';
			for my $rel (keys %{ $p->{$phase} })
			{
				next if custom($rel);
				my $set = $p->{$phase}{$rel};
				return 0 unless $rel =~ /^(requires|recommends|suggests|conflicts)$/
				  && ref $set eq 'HASH';
				return 0 if grep { !is_term($_) || !is_range($set->{$_}) } keys %$set;
			}
		}
		return 1;
	},
	release_status => sub { defined $_[0] && $_[0] =~ /^(stable|testing|unstable)$/ },
	resources => sub { ref $_[0] eq 'HASH' },
);

for my $required (qw(name abstract version maintainer license provides meta-spec))
{
	ok(exists $meta->{$required}, "META.json has the required field $required");
}
for my $key (sort keys %$meta)
{
	if (custom($key))
	{
		pass("custom field $key");
		next;
	}
	ok($field{$key}, "$key is a field of the spec") or next;
	ok($field{$key}->($meta->{$key}), "$key is what the spec says it is")
	  or diag(JSON::PP->new->canonical->encode({ $key => $meta->{$key} }));
}

is($meta->{name}, 'ratelimit', 'the distribution is ratelimit');
is($meta->{version}, $version, 'META.json version is the control file\'s default_version');
my %provides = %{ ref $meta->{provides} eq 'HASH' ? $meta->{provides} : {} };
is_deeply([ sort keys %provides ], [ sort keys %controls ],
	'META.json provides every extension of the tree, each control file, and no other');
for my $name (sort keys %provides)
{
	my $e = $provides{$name};
	is($e->{version}, $controls{$name}, "$name: its version is its control file's default_version");
	for my $file (grep { defined $e->{$_} } qw(file docfile))
	{
		ok(in_tree($e->{$file}), "$name: its $file $e->{$file} is a file of the distribution");
	}
}

my %runtime = map { %{ $meta->{prereqs}{runtime}{$_} // {} } } qw(requires recommends);
my $pg = $meta->{prereqs}{runtime}{requires}{PostgreSQL};
ok(defined $pg && !satisfies('14.99.0', $pg) && !satisfies('19.0.0', $pg)
	  && !grep({ !satisfies($_, $pg) } qw(15.0.0 17.0.0 18.99.0)),
	'it requires PostgreSQL 15 to 18 at run time, the majors .ci/run tests');
ok(exists $runtime{plproxy}, 'it names plproxy, which the proxy extension needs, at run time');
is(ref $meta->{license} ? '' : $meta->{license}, 'postgresql', 'its license is the PostgreSQL License');
like(slurp("$src/LICENSE"), qr/PostgreSQL License/, 'which LICENSE states');

my $changelog = `cd $src && dpkg-parsechangelog -S Version`;
chomp $changelog;
is($changelog =~ s/-[^-]+$//r, $version, 'debian/changelog releases the same version');
my $distname = `make -s --no-print-directory -C $src --eval 'print-%: ; \@echo \$(\$*)' print-DISTNAME`;
chomp $distname;
is($distname, "ratelimit-$version", 'make dist names the archive with the same version');

done_testing();
