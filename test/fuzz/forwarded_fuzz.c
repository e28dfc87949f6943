/*
 * forwarded_fuzz.c
 *		libFuzzer target for the header parser (src/forwarded_parse.c).
 *
 * Build and run with test/fuzz/run.  The first input byte chooses what is
 * fuzzed, the rest is the text:
 *
 *	 byte % 5 == 0	X-Forwarded-For walk      (byte / 5 % 4 picks the trust)
 *	 byte % 5 == 1	Forwarded walk            (the same)
 *	 byte % 5 == 2	IPv4 and IPv6 parsing, checked against inet_pton and
 *					against the formatter (format, parse again, same bits)
 *	 byte % 5 == 3	a trust list, as ratelimit.trusted_proxies is parsed
 *	 byte % 5 == 4	a rate-limit key of 16 address bytes and a prefix
 *
 * Beyond the sanitizers' checks, every property the walk promises is
 * asserted: the cursor always moves left, an untrusted peer is always the
 * answer, and an answer is never unspecified or IPv4-mapped.
 */
#include "forwarded_parse.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "property failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

/* Peer and trusted ranges of each walk configuration. */
static const struct
{
	const char *peer;
	const char *trusted;
}			configs[4] = {
	{"10.0.0.1", "10.0.0.0/8, 2001:db8::/32, ::ffff:192.168.0.0/112"},
	/* almost everything is trusted, so walks run to the hop limit */
	{"::ffff:10.0.0.1", "0.0.0.0/1, 128.0.0.0/1, 2000::/3, 4000::/2, 8000::/1, ::/96"},
	{"192.0.2.1", ""},
	{"2001:db8::1", "10.0.0.0/8, 2001:db8::/32"},
};

static FwdAddr
parse_any(const char *text)
{
	FwdAddr		a;

	CHECK(strchr(text, ':') ? fwd_parse_ipv6(text, strlen(text), &a) :
		  fwd_parse_ipv4(text, strlen(text), &a));
	return a;
}

static bool
is_mapped_or_zero(const FwdAddr *a)
{
	static const uint8_t zero[16] = {0};
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(a->bytes, zero, 16) == 0 ||
		(a->family == FWD_IPV6 && memcmp(a->bytes, mapped, 12) == 0);
}

static void
fuzz_walk(FwdHeaderKind kind, int config, const char *text, size_t len)
{
	FwdRange	trusted[8];
	size_t		ntrusted,
				off,
				bad;
	FwdAddr		peer = parse_any(configs[config].peer);
	FwdAddr		answer;
	FwdCursor	cursor;
	FwdAddr		node;
	FwdStep		step;

	CHECK(fwd_parse_trust_list(configs[config].trusted,
							   strlen(configs[config].trusted), trusted, 8,
							   &ntrusted, &off, &bad) == FWD_RANGE_OK);

	/* the cursor makes progress and yields only usable addresses */
	fwd_cursor_init(&cursor, kind, text, len);
	for (;;)
	{
		size_t		before = cursor.unread;

		step = fwd_cursor_next(&cursor, &node);
		CHECK(cursor.unread <= len);
		if (step != FWD_STEP_NODE)
		{
			CHECK(cursor.unread == 0);
			break;
		}
		CHECK(cursor.unread < before);
		CHECK(!is_mapped_or_zero(&node));
	}

	answer = fwd_client_addr(kind, &peer, text, len, trusted, ntrusted);
	CHECK(!is_mapped_or_zero(&answer));
	if (ntrusted == 0)
	{
		fwd_addr_unmap(&peer);
		CHECK(fwd_addr_equal(&answer, &peer));
	}
}

/* Our strict parsers accept exactly what inet_pton accepts, bit for bit. */
static void
fuzz_addresses(const char *text, size_t len)
{
	char		cstr[128];
	uint8_t		theirs[16];
	FwdAddr		ours;
	bool		ok;

	if (len >= sizeof(cstr) || memchr(text, '\0', len))
		return;
	memcpy(cstr, text, len);
	cstr[len] = '\0';

	ok = fwd_parse_ipv4(text, len, &ours);
	CHECK(ok == (inet_pton(AF_INET, cstr, theirs) == 1));
	if (ok)
		CHECK(memcmp(ours.bytes, theirs, 4) == 0);

	ok = fwd_parse_ipv6(text, len, &ours);
	CHECK(ok == (inet_pton(AF_INET6, cstr, theirs) == 1));
	if (ok)
	{
		char		buf[FWD_TEXT_SIZE];
		size_t		n;
		FwdAddr		again;

		CHECK(memcmp(ours.bytes, theirs, 16) == 0);
		n = fwd_format_addr(&ours, buf);
		CHECK(n == strlen(buf) && n < FWD_TEXT_SIZE);
		CHECK(fwd_parse_ipv6(buf, n, &again));
		CHECK(fwd_addr_equal(&again, &ours));
	}
}

static void
fuzz_trust_list(const char *text, size_t len)
{
	FwdRange	ranges[16];
	size_t		count,
				filled,
				off,
				bad,
				i;
	FwdRangeStatus status;

	status = fwd_parse_trust_list(text, len, NULL, 0, &count, &off, &bad);
	if (status != FWD_RANGE_OK)
	{
		CHECK(off <= len && bad <= len - off);
		CHECK(fwd_range_status_detail(status)[0] != '\0');
		return;
	}
	CHECK(fwd_parse_trust_list(text, len, ranges, 16, &filled, &off, &bad) ==
		  FWD_RANGE_OK && filled == count);
	for (i = 0; i < count && i < 16; i++)
	{
		FwdRange	again = ranges[i];

		CHECK(ranges[i].bits >= 1 &&
			  ranges[i].bits <= (ranges[i].addr.family == FWD_IPV4 ? 32 : 128));
		/* a normalized range is stable and never trusts all of IPv4 */
		CHECK(fwd_range_normalize(&again) == FWD_RANGE_OK);
		CHECK(again.bits == ranges[i].bits &&
			  fwd_addr_equal(&again.addr, &ranges[i].addr));
	}
}

static void
fuzz_key(const uint8_t *data, size_t size)
{
	FwdAddr		ip;
	char		buf[FWD_TEXT_SIZE];
	int			prefix;

	if (size < 18)
		return;
	ip.family = data[0] & 1 ? FWD_IPV6 : FWD_IPV4;
	memset(ip.bytes, 0, 16);
	memcpy(ip.bytes, data + 2, ip.family == FWD_IPV6 ? 16 : 4);
	prefix = (int) data[1] - 64;
	if (!fwd_ip_key(&ip, prefix, buf))
	{
		CHECK(prefix < 1 || prefix > 128);
		return;
	}
	CHECK(strlen(buf) < FWD_TEXT_SIZE);
	if (strchr(buf, '/'))
	{
		FwdRange	masked;

		/* the key is the prefix of ip, with every later bit clear */
		CHECK(fwd_parse_ipv6(buf, (size_t) (strchr(buf, '/') - buf), &masked.addr));
		CHECK(atoi(strchr(buf, '/') + 1) == prefix);
		masked.bits = prefix;
		CHECK(fwd_range_contains(&masked, &ip));
		CHECK(fwd_range_normalize(&masked) != FWD_RANGE_HOST_BITS);
	}
	else
		CHECK(strchr(buf, ':') == NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text;
	size_t		len;
	char	   *copy;

	if (size == 0)
		return 0;
	/* an exact-size copy, so a read past the end is caught */
	len = size - 1;
	copy = malloc(len ? len : 1);
	memcpy(copy, data + 1, len);
	text = copy;

	switch (data[0] % 5)
	{
		case 0:
			fuzz_walk(FWD_HEADER_XFF, data[0] / 5 % 4, text, len);
			break;
		case 1:
			fuzz_walk(FWD_HEADER_FORWARDED, data[0] / 5 % 4, text, len);
			break;
		case 2:
			fuzz_addresses(text, len);
			break;
		case 3:
			fuzz_trust_list(text, len);
			break;
		case 4:
			fuzz_key(data + 1, len);
			break;
	}
	free(copy);
	return 0;
}
