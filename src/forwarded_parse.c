/*
 * forwarded_parse.c
 *		The one parser of X-Forwarded-For and RFC 7239 Forwarded headers, the
 *		right-to-left walk over trusted proxies, trusted ranges, and the text
 *		of IP rate-limit keys.
 *
 * No PostgreSQL includes: src/client_ip.c wraps this for SQL, and the unit
 * tests and the fuzz target link it as it is.  See forwarded_parse.h for the
 * rules every function follows on hostile input.
 *
 * The walk (fwd_client_addr) implements the "Trusted proxies" rules of the
 * design: start at the peer; while the current hop is trusted, step to the
 * entry on its left; a malformed entry answers the trusted hop that wrote it.
 * Both headers are read by one cursor that yields one node per entry from
 * the right, so the part of a header left of where the walk stops (the part
 * a client wrote) is never parsed.
 */
#include "forwarded_parse.h"

#include <stdio.h>
#include <string.h>

static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Optional white space of HTTP: spaces and tabs. */
static bool
is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* RFC 7230 tchar: the characters of a token. */
static bool
is_tchar(char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c))
		return true;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 6874 zone identifiers: unreserved characters only. */
static bool
is_zone_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) ||
		c == '.' || c == '_' || c == '~' || c == '-';
}

/*
 * Exactly four decimal octets 0-255 without leading zeros: "010.1.1.1",
 * "1.1", "0x7f.0.0.1" and the like are refused, not read as other addresses.
 */
bool
fwd_parse_ipv4(const char *text, size_t len, FwdAddr *out)
{
	size_t		i = 0;
	int			octet;

	for (octet = 0; octet < 4; octet++)
	{
		size_t		start;
		unsigned	value = 0;

		if (octet > 0)
		{
			if (i >= len || text[i] != '.')
				return false;
			i++;
		}
		start = i;
		while (i < len && i - start < 3 && is_digit(text[i]))
			value = value * 10 + (unsigned) (text[i++] - '0');
		if (i == start || value > 255 || (i - start > 1 && text[start] == '0'))
			return false;
		out->bytes[octet] = (uint8_t) value;
	}
	if (i != len)
		return false;
	out->family = FWD_IPV4;
	memset(out->bytes + 4, 0, 12);
	return true;
}

/*
 * RFC 4291 text: eight groups of 1-4 hex digits, at most one "::" standing
 * for one or more zero groups, optionally ending in a dotted IPv4 address.
 * No zone, no brackets.  IPv4-mapped addresses are returned as IPv6.
 */
bool
fwd_parse_ipv6(const char *text, size_t len, FwdAddr *out)
{
	uint8_t		bytes[16];
	int			n = 0;			/* bytes filled */
	int			gap = -1;		/* where "::" stands, in bytes */
	size_t		i = 0;

	if (len >= 2 && text[0] == ':' && text[1] == ':')
	{
		gap = 0;
		i = 2;
	}
	while (i < len)
	{
		size_t		start = i;
		unsigned	value = 0;
		int			digit;

		while (i < len && i - start < 5 && (digit = hex_value(text[i])) >= 0)
		{
			value = value * 16 + (unsigned) digit;
			i++;
		}
		if (i < len && text[i] == '.')
		{
			FwdAddr		v4;

			/* a dotted IPv4 address ends the text and fills two groups */
			if (n > 12 || !fwd_parse_ipv4(text + start, len - start, &v4))
				return false;
			memcpy(bytes + n, v4.bytes, 4);
			n += 4;
			break;
		}
		if (i == start || i - start > 4 || n == 16)
			return false;
		bytes[n++] = (uint8_t) (value >> 8);
		bytes[n++] = (uint8_t) value;
		if (i == len)
			break;
		if (text[i] != ':' || ++i == len)
			return false;
		if (text[i] == ':')
		{
			if (gap >= 0)
				return false;
			gap = n;
			i++;
		}
	}

	if (gap < 0 ? n != 16 : n == 16)
		return false;
	out->family = FWD_IPV6;
	memset(out->bytes, 0, 16);
	if (gap < 0)
		memcpy(out->bytes, bytes, 16);
	else
	{
		memcpy(out->bytes, bytes, gap);
		memcpy(out->bytes + 16 - (n - gap), bytes + gap, n - gap);
	}
	return true;
}

static bool
is_mapped(const FwdAddr *addr)
{
	return addr->family == FWD_IPV6 &&
		memcmp(addr->bytes, mapped_prefix, sizeof(mapped_prefix)) == 0;
}

/* IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes IPv4, judged by its bits. */
void
fwd_addr_unmap(FwdAddr *addr)
{
	if (!is_mapped(addr))
		return;
	addr->family = FWD_IPV4;
	memmove(addr->bytes, addr->bytes + 12, 4);
	memset(addr->bytes + 4, 0, 12);
}

bool
fwd_addr_equal(const FwdAddr *a, const FwdAddr *b)
{
	return a->family == b->family && memcmp(a->bytes, b->bytes, 16) == 0;
}

static bool
is_unspecified(const FwdAddr *addr)
{
	static const uint8_t zero[16] = {0};

	return memcmp(addr->bytes, zero, 16) == 0;
}

/* Do a and b agree on their first bits bits? */
static bool
prefix_equal(const uint8_t *a, const uint8_t *b, int bits)
{
	int			whole = bits / 8;
	int			rest = bits % 8;
	uint8_t		mask;

	if (memcmp(a, b, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	mask = (uint8_t) (0xff << (8 - rest));
	return ((a[whole] ^ b[whole]) & mask) == 0;
}

/* Clear every bit right of the first bits bits. */
static void
mask_bits(uint8_t *bytes, int size, int bits)
{
	int			i;

	for (i = 0; i < size; i++)
	{
		int			keep = bits - i * 8;

		if (keep <= 0)
			bytes[i] = 0;
		else if (keep < 8)
			bytes[i] &= (uint8_t) (0xff << (8 - keep));
	}
}

/*
 * Check a trusted range and bring it to the form the walk compares with:
 * a range inside ::ffff:0:0/96 with a prefix over 96 becomes the IPv4 range
 * it maps.  Refused: /0 in either family, and an IPv6 range that covers all
 * of ::ffff:0:0/96, since either would trust every client.
 */
FwdRangeStatus
fwd_range_normalize(FwdRange *range)
{
	int			size = range->addr.family == FWD_IPV4 ? 4 : 16;
	uint8_t		masked[16];

	if (range->bits < 0 || range->bits > size * 8)
		return FWD_RANGE_BAD_PREFIX;
	if (range->bits == 0)
		return FWD_RANGE_ZERO_PREFIX;
	memcpy(masked, range->addr.bytes, 16);
	mask_bits(masked, 16, range->bits);
	if (memcmp(masked, range->addr.bytes, 16) != 0)
		return FWD_RANGE_HOST_BITS;
	if (range->addr.family == FWD_IPV6)
	{
		if (range->bits <= 96 &&
			prefix_equal(range->addr.bytes, mapped_prefix, range->bits))
			return FWD_RANGE_ALL_MAPPED;
		if (is_mapped(&range->addr))
		{
			fwd_addr_unmap(&range->addr);
			range->bits -= 96;
		}
	}
	return FWD_RANGE_OK;
}

bool
fwd_range_contains(const FwdRange *range, const FwdAddr *addr)
{
	return range->addr.family == addr->family &&
		prefix_equal(range->addr.bytes, addr->bytes, range->bits);
}

/* Why a range was refused, as a phrase that follows the range's text. */
const char *
fwd_range_status_detail(FwdRangeStatus status)
{
	switch (status)
	{
		case FWD_RANGE_OK:
			return "is valid";
		case FWD_RANGE_SYNTAX:
			return "is not an IPv4 or IPv6 address with an optional /prefix length";
		case FWD_RANGE_BAD_PREFIX:
			return "has a prefix length above 32 for IPv4 or 128 for IPv6";
		case FWD_RANGE_HOST_BITS:
			return "has bits set to the right of its prefix length";
		case FWD_RANGE_ZERO_PREFIX:
			return "has a prefix length of 0, which would trust every address";
		case FWD_RANGE_ALL_MAPPED:
			return "covers all of ::ffff:0:0/96, which would trust every IPv4 address";
	}
	return "is invalid";
}

/* One "address[/prefix]" of a trust list, already trimmed. */
static FwdRangeStatus
parse_range(const char *text, size_t len, FwdRange *range)
{
	const char *slash = memchr(text, '/', len);
	size_t		addr_len = slash ? (size_t) (slash - text) : len;
	bool		ok;

	if (memchr(text, ':', addr_len))
		ok = fwd_parse_ipv6(text, addr_len, &range->addr);
	else
		ok = fwd_parse_ipv4(text, addr_len, &range->addr);
	if (!ok)
		return FWD_RANGE_SYNTAX;

	if (slash == NULL)
		range->bits = range->addr.family == FWD_IPV4 ? 32 : 128;
	else
	{
		const char *digits = slash + 1;
		size_t		ndigits = len - addr_len - 1;
		size_t		i;

		if (ndigits == 0 || ndigits > 3 || (ndigits > 1 && digits[0] == '0'))
			return FWD_RANGE_SYNTAX;
		range->bits = 0;
		for (i = 0; i < ndigits; i++)
		{
			if (!is_digit(digits[i]))
				return FWD_RANGE_SYNTAX;
			range->bits = range->bits * 10 + (digits[i] - '0');
		}
	}
	return fwd_range_normalize(range);
}

/*
 * Parse a comma-separated list of addresses and CIDR ranges (spaces and tabs
 * around each allowed; an empty or blank text is the empty list).  Stores up
 * to capacity ranges in out (which may be NULL to only check and count) and
 * sets *count to the number in the text.  On an error, *bad_offset and
 * *bad_len locate the refused entry.
 */
FwdRangeStatus
fwd_parse_trust_list(const char *text, size_t len, FwdRange *out,
					 size_t capacity, size_t *count, size_t *bad_offset,
					 size_t *bad_len)
{
	size_t		pos = 0;
	size_t		n = 0;

	*count = 0;
	while (pos < len && is_ows(text[pos]))
		pos++;
	if (pos == len)
		return FWD_RANGE_OK;

	for (pos = 0; pos <= len; pos++)
	{
		size_t		start = pos;
		size_t		end;
		FwdRange	range;
		FwdRangeStatus status;

		while (pos < len && text[pos] != ',')
			pos++;
		end = pos;
		while (start < end && is_ows(text[start]))
			start++;
		while (end > start && is_ows(text[end - 1]))
			end--;
		status = start == end ? FWD_RANGE_SYNTAX :
			parse_range(text + start, end - start, &range);
		if (status != FWD_RANGE_OK)
		{
			*bad_offset = start;
			*bad_len = end - start;
			return status;
		}
		if (n < capacity)
			out[n] = range;
		n++;
	}
	*count = n;
	return FWD_RANGE_OK;
}

/* Ports are 1-65535 in decimal, without leading zeros. */
static bool
parse_port(const char *text, size_t len)
{
	unsigned	value = 0;
	size_t		i;

	if (len == 0 || len > 5 || text[0] == '0')
		return false;
	for (i = 0; i < len; i++)
	{
		if (!is_digit(text[i]))
			return false;
		value = value * 10 + (unsigned) (text[i] - '0');
	}
	return value <= 65535;
}

/* IPv6 with an optional "%zone" of unreserved characters, which is dropped. */
static bool
parse_ipv6_zoned(const char *text, size_t len, FwdAddr *out)
{
	const char *percent = memchr(text, '%', len);

	if (percent != NULL)
	{
		const char *zone = percent + 1;
		const char *end = text + len;

		if (zone == end)
			return false;
		for (; zone < end; zone++)
			if (!is_zone_char(*zone))
				return false;
		len = (size_t) (percent - text);
	}
	return fwd_parse_ipv6(text, len, out);
}

/*
 * One node: IPv4 with an optional ":port", "[IPv6]" with an optional
 * ":port", or (when bare_ipv6, as X-Forwarded-For allows) IPv6 without
 * brackets and so without a port.  IPv6 may carry a zone.  The unspecified
 * addresses and anything else (hostnames, "unknown", "_obfuscated", netmasks,
 * "[IPv4]") are malformed.  The address comes back unmapped.
 */
static bool
parse_node(const char *text, size_t len, bool bare_ipv6, FwdAddr *out)
{
	bool		ok;

	if (len == 0 || len > FWD_MAX_ENTRY_LEN)
		return false;
	if (text[0] == '[')
	{
		const char *close = memchr(text, ']', len);
		size_t		inner;

		if (close == NULL)
			return false;
		inner = (size_t) (close - text) - 1;
		ok = parse_ipv6_zoned(text + 1, inner, out) &&
			(inner + 2 == len ||
			 (close[1] == ':' && parse_port(close + 2, len - inner - 3)));
	}
	else
	{
		const char *colon = memchr(text, ':', len);
		size_t		host = colon ? (size_t) (colon - text) : len;

		if (fwd_parse_ipv4(text, host, out))
			ok = colon == NULL || parse_port(colon + 1, len - host - 1);
		else
			ok = bare_ipv6 && parse_ipv6_zoned(text, len, out);
	}
	if (!ok)
		return false;
	fwd_addr_unmap(out);
	return !is_unspecified(out);
}

/* The position left of the white space that ends at pos. */
static size_t
skip_ows_left(const char *s, size_t pos)
{
	while (pos > 0 && is_ows(s[pos - 1]))
		pos--;
	return pos;
}

/*
 * X-Forwarded-For: the entry that ends at the cursor.  Entries are separated
 * by commas and trimmed of spaces and tabs; empty ones are skipped.  An entry
 * is never read beyond its 65th byte: that is already too long.
 */
static FwdStep
xff_next(FwdCursor *cursor, FwdAddr *node)
{
	const char *s = cursor->header;
	size_t		pos = cursor->unread;

	for (;;)
	{
		size_t		end = skip_ows_left(s, pos);
		size_t		start = end;

		if (end == 0)
			return FWD_STEP_END;
		if (s[end - 1] == ',')
		{
			pos = end - 1;
			continue;
		}
		while (start > 0 && s[start - 1] != ',' && !is_ows(s[start - 1]))
		{
			if (end - start == FWD_MAX_ENTRY_LEN)
				return FWD_STEP_MALFORMED;
			start--;
		}
		/* white space left of the entry must reach a comma or the start */
		pos = skip_ows_left(s, start);
		if (pos > 0 && s[pos - 1] != ',')
			return FWD_STEP_MALFORMED;
		cursor->unread = pos > 0 ? pos - 1 : 0;
		return parse_node(s + start, end - start, true, node) ?
			FWD_STEP_NODE : FWD_STEP_MALFORMED;
	}
}

/*
 * The quoted-string whose closing quote is at s[close], read leftwards: sets
 * *open to the position of its opening quote, or answers false on a syntax
 * error.  A quote is escaped when an odd number of backslashes precede it: a
 * run of backslashes inside a quoted-string always starts on a quoted-pair
 * boundary, so its parity decides.
 */
static bool
quoted_string_start(const char *s, size_t close, size_t *open)
{
	size_t		pos = close;
	bool		closing = true;

	for (;;)
	{
		unsigned char c = (unsigned char) s[pos];

		if (c == '"')
		{
			size_t		slashes = 0;

			while (slashes < pos && s[pos - 1 - slashes] == '\\')
				slashes++;
			if (slashes % 2 == 0)
			{
				if (!closing)
				{
					*open = pos;
					return true;
				}
			}
			else if (closing)
				return false;	/* the last quote is escaped: unterminated */
			closing = false;
		}
		else if (c < 0x20 ? c != '\t' : c == 0x7f)
			return false;		/* control characters are never allowed */
		if (pos == 0)
			return false;
		pos--;
	}
}

/* Is s[start .. end) the parameter name "for", in any case? */
static bool
is_for(const char *s, size_t start, size_t end)
{
	return end - start == 3 &&
		(s[start] | 0x20) == 'f' &&
		(s[start + 1] | 0x20) == 'o' &&
		(s[start + 2] | 0x20) == 'r';
}

/*
 * RFC 7239 Forwarded: the element that ends at the cursor, read from its
 * right end.  An element is pairs name=value (value a token or a
 * quoted-string) separated by ";"; elements are separated by ",".  Spaces and
 * tabs are allowed around "," and ";", not around "=".  Empty elements are
 * skipped.  An element without exactly one for=, or with any syntax error,
 * is malformed: the walk stops there, so a quote a client injected on the
 * left cannot pair with one a proxy wrote.
 */
static FwdStep
forwarded_next(FwdCursor *cursor, FwdAddr *node)
{
	const char *s = cursor->header;
	size_t		pos = cursor->unread;

	for (;;)
	{
		bool		empty = true;
		bool		have_for = false;
		bool		for_quoted = false;
		size_t		for_start = 0;
		size_t		for_end = 0;

		pos = skip_ows_left(s, pos);
		if (pos == 0)
			return FWD_STEP_END;

		/* pairs of this element, from the right */
		while (pos > 0 && s[pos - 1] != ',')
		{
			empty = false;
			if (s[pos - 1] != ';')
			{
				size_t		value_start;
				size_t		value_end = pos;
				size_t		name_end;
				bool		quoted = s[pos - 1] == '"';

				if (quoted)
				{
					if (!quoted_string_start(s, pos - 1, &pos))
						return FWD_STEP_MALFORMED;
					value_start = pos + 1;
					value_end--;
				}
				else
				{
					while (pos > 0 && is_tchar(s[pos - 1]))
						pos--;
					value_start = pos;
					if (value_start == value_end)
						return FWD_STEP_MALFORMED;
				}
				if (pos == 0 || s[pos - 1] != '=')
					return FWD_STEP_MALFORMED;
				name_end = --pos;
				while (pos > 0 && is_tchar(s[pos - 1]))
					pos--;
				if (pos == name_end)
					return FWD_STEP_MALFORMED;
				if (is_for(s, pos, name_end))
				{
					/* RFC 7239: a parameter occurs at most once per element */
					if (have_for)
						return FWD_STEP_MALFORMED;
					have_for = true;
					for_quoted = quoted;
					for_start = value_start;
					for_end = value_end;
				}
				pos = skip_ows_left(s, pos);
				if (pos == 0 || s[pos - 1] == ',')
					break;
				if (s[pos - 1] != ';')
					return FWD_STEP_MALFORMED;
			}
			pos = skip_ows_left(s, pos - 1);	/* past the ';' */
		}
		if (pos > 0)
			pos--;				/* past the ',' */
		cursor->unread = pos;
		if (empty)
			continue;
		if (!have_for)
			return FWD_STEP_MALFORMED;
		/* quoted-pairs never belong in a node: refuse rather than unescape */
		if (for_quoted && memchr(s + for_start, '\\', for_end - for_start))
			return FWD_STEP_MALFORMED;
		return parse_node(s + for_start, for_end - for_start, false, node) ?
			FWD_STEP_NODE : FWD_STEP_MALFORMED;
	}
}

void
fwd_cursor_init(FwdCursor *cursor, FwdHeaderKind kind, const char *header,
				size_t len)
{
	cursor->kind = kind;
	cursor->header = header;
	cursor->unread = header ? len : 0;
}

/*
 * The next node from the right.  After FWD_STEP_MALFORMED the cursor is at
 * its end: nothing left of a malformed entry is trustworthy.
 */
FwdStep
fwd_cursor_next(FwdCursor *cursor, FwdAddr *node)
{
	FwdStep		step;

	step = cursor->kind == FWD_HEADER_XFF ?
		xff_next(cursor, node) : forwarded_next(cursor, node);
	if (step != FWD_STEP_NODE)
		cursor->unread = 0;
	return step;
}

static bool
is_trusted(const FwdAddr *addr, const FwdRange *trusted, size_t ntrusted)
{
	size_t		i;

	for (i = 0; i < ntrusted; i++)
		if (fwd_range_contains(&trusted[i], addr))
			return true;
	return false;
}

/*
 * The address the nearest trusted proxy saw.  remote is the peer of the
 * connection (unmapped here); trusted holds normalized ranges.  Reads at most
 * FWD_MAX_TRUSTED_HOPS + 1 entries of the header, from its right end.
 */
FwdAddr
fwd_client_addr(FwdHeaderKind kind, const FwdAddr *remote, const char *header,
				size_t len, const FwdRange *trusted, size_t ntrusted)
{
	FwdAddr		cur = *remote;
	FwdCursor	cursor;
	int			hops;

	fwd_addr_unmap(&cur);
	if (!is_trusted(&cur, trusted, ntrusted))
		return cur;
	fwd_cursor_init(&cursor, kind, header, len);
	for (hops = 0; hops < FWD_MAX_TRUSTED_HOPS; hops++)
	{
		FwdAddr		node;

		if (fwd_cursor_next(&cursor, &node) != FWD_STEP_NODE)
			return cur;
		if (!is_trusted(&node, trusted, ntrusted))
			return node;
		cur = node;
	}
	return cur;
}

/*
 * Write addr as text: dotted IPv4, or RFC 5952 IPv6 (lower-case hex without
 * leading zeros, the longest run of two or more zero groups, the first of
 * equals, written "::").  buf holds FWD_TEXT_SIZE bytes; returns the length.
 */
size_t
fwd_format_addr(const FwdAddr *addr, char *buf)
{
	const uint8_t *b = addr->bytes;
	int			best = -1;
	int			best_len = 1;
	int			i;
	size_t		n = 0;

	if (addr->family == FWD_IPV4)
		return (size_t) snprintf(buf, FWD_TEXT_SIZE, "%u.%u.%u.%u",
								 b[0], b[1], b[2], b[3]);

	for (i = 0; i < 8; i++)
	{
		int			run = 0;

		while (i + run < 8 && b[2 * (i + run)] == 0 && b[2 * (i + run) + 1] == 0)
			run++;
		if (run > best_len)
		{
			best = i;
			best_len = run;
		}
	}
	for (i = 0; i < 8; i++)
	{
		if (i == best)
		{
			n += (size_t) snprintf(buf + n, FWD_TEXT_SIZE - n, "::");
			i += best_len - 1;
			continue;
		}
		n += (size_t) snprintf(buf + n, FWD_TEXT_SIZE - n, "%s%x",
							   (i == 0 || i == best + best_len) ? "" : ":",
							   (unsigned) (b[2 * i] << 8 | b[2 * i + 1]));
	}
	return n;
}

/*
 * The text of a rate-limit key for ip: IPv4 (IPv4-mapped included) as its
 * dotted address; IPv6 masked to its first ipv6_prefix bits and written with
 * the prefix length, e.g. "2001:db8:1:2::/64", so a host cannot leave its
 * budget by rotating addresses inside its prefix.  False when ipv6_prefix is
 * outside 1-128 (checked for either family).
 */
bool
fwd_ip_key(const FwdAddr *ip, int ipv6_prefix, char *buf)
{
	FwdAddr		addr = *ip;
	size_t		n;

	if (ipv6_prefix < 1 || ipv6_prefix > 128)
		return false;
	fwd_addr_unmap(&addr);
	if (addr.family == FWD_IPV4)
	{
		fwd_format_addr(&addr, buf);
		return true;
	}
	mask_bits(addr.bytes, 16, ipv6_prefix);
	n = fwd_format_addr(&addr, buf);
	snprintf(buf + n, FWD_TEXT_SIZE - n, "/%d", ipv6_prefix);
	return true;
}
