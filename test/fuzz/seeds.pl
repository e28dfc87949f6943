#!/usr/bin/perl
# Writes the fuzz target's seed corpus from the test vectors:
#
#   seeds.pl test/vectors/client_ip.tsv DIR
#
# Each vector's header becomes one seed per walk configuration of the target
# (first byte: header kind + 5 * configuration), its addresses and header
# entries seeds of the address parsers (first byte 2), its trusted array a
# trust-list seed (3).
# Prints the number of seeds written.
use strict;
use warnings;

my ($tsv, $dir) = @ARGV;
die "usage: $0 VECTORS.tsv DIR\n" unless $tsv && $dir;

# COPY text format: \N is NULL; \t, \n and \\ are escapes
sub field
{
	my ($f) = @_;
	return undef if $f eq '\N';
	$f =~ s/\\(.)/$1 eq 't' ? "\t" : $1 eq 'n' ? "\n" : $1/ge;
	return $f;
}

my $n = 0;
sub seed
{
	my ($selector, $text) = @_;
	my $path = sprintf('%s/vector-%04d', $dir, $n++);
	open(my $fh, '>:raw', $path) or die "$path: $!\n";
	print $fh chr($selector), $text;
	close($fh);
}

open(my $in, '<', $tsv) or die "$tsv: $!\n";
while (my $line = <$in>)
{
	chomp $line;
	my ($fn, $remote, $header, $trusted, $expected) =
	  map { field($_) } split(/\t/, $line, -1);
	my $kind = $fn eq 'rl_client_ip_forwarded' ? 1 : 0;
	my @addresses = ($remote, $expected);
	if (defined $header)
	{
		seed($kind + 5 * $_, $header) for 0 .. 3;
		# every entry, stripped to what may be an address
		for my $entry (split /[,;]/, $header)
		{
			$entry =~ s/^[\s]*(?:for=)?"?\[?|\]?(?::\d*)?"?[\s]*$//gi;
			push @addresses, $entry;
		}
	}
	for my $addr (@addresses)
	{
		next unless defined $addr && $addr ne '' && $addr !~ /^ERROR/;
		$addr =~ s{/\d+$}{};
		seed(2, $addr);
	}
	if (defined $trusted)
	{
		(my $list = $trusted) =~ s/^\{|\}$//g;
		seed(3, join(', ', grep { $_ ne 'NULL' } split(/,/, $list)));
	}
}
close($in);
print "$n seeds\n";
