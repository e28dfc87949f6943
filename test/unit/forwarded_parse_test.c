/*
 * forwarded_parse_test.c
 *		Unit tests of the pure header parser (src/forwarded_parse.c), printing
 *		TAP.  Expected values are written from the design's rules.
 *
 * The parser is compiled into this program directly, so the test needs no
 * build step of its own.  Every header is copied into a heap block of its
 * exact length (no NUL), so AddressSanitizer reports any read past either
 * end; the guard-page tests go further and put the part of a header the walk
 * must never reach on memory that cannot be read at all.
 */
#define _DEFAULT_SOURCE

#include "../../src/forwarded_parse.c"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int	tests_run;

static void
ok(bool cond, const char *fmt,...)
{
	va_list		ap;

	printf("%s %d - ", cond ? "ok" : "not ok", ++tests_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static void
is_text(const char *got, const char *want, const char *what)
{
	bool		same = strcmp(got, want) == 0;

	ok(same, "%s: %s", what, want);
	if (!same)
		printf("#   got \"%s\"\n", got);
}

/* A heap copy of exactly strlen(text) bytes: no terminator to lean on. */
static char *
exact_copy(const char *text, size_t len)
{
	char	   *copy = malloc(len ? len : 1);

	memcpy(copy, text, len);
	return copy;
}

/* The address as text, or "-" when parsing failed. */
static const char *
addr_text(bool parsed, const FwdAddr *addr)
{
	static char buf[FWD_TEXT_SIZE];

	if (!parsed)
		return "-";
	fwd_format_addr(addr, buf);
	return buf;
}

static void
check_ipv4(const char *text, const char *want)
{
	size_t		len = strlen(text);
	char	   *copy = exact_copy(text, len);
	FwdAddr		addr;

	is_text(addr_text(fwd_parse_ipv4(copy, len, &addr), &addr), want, text);
	free(copy);
}

static void
check_ipv6(const char *text, const char *want)
{
	size_t		len = strlen(text);
	char	   *copy = exact_copy(text, len);
	FwdAddr		addr;

	is_text(addr_text(fwd_parse_ipv6(copy, len, &addr), &addr), want, text);
	free(copy);
}

/*
 * Every entry of header from the right, as "addr addr ! ." where "!" is a
 * malformed entry and "." the end.
 */
static const char *
walk_entries(FwdHeaderKind kind, const char *header)
{
	static char out[1024];
	size_t		len = strlen(header);
	char	   *copy = exact_copy(header, len);
	FwdCursor	cursor;
	size_t		n = 0;

	fwd_cursor_init(&cursor, kind, copy, len);
	for (;;)
	{
		FwdAddr		node;
		FwdStep		step = fwd_cursor_next(&cursor, &node);
		char		buf[FWD_TEXT_SIZE];

		if (step == FWD_STEP_NODE)
			fwd_format_addr(&node, buf);
		n += snprintf(out + n, sizeof(out) - n, "%s%s", n ? " " : "",
					  step == FWD_STEP_NODE ? buf :
					  step == FWD_STEP_MALFORMED ? "!" : ".");
		if (step != FWD_STEP_NODE)
			break;
	}
	free(copy);
	return out;
}

static void
check_xff(const char *header, const char *want)
{
	is_text(walk_entries(FWD_HEADER_XFF, header), want, header);
}

static void
check_forwarded(const char *header, const char *want)
{
	is_text(walk_entries(FWD_HEADER_FORWARDED, header), want, header);
}

/* Parse a trust list the tests write correctly. */
static size_t
trust(const char *list, FwdRange *out, size_t capacity)
{
	size_t		count,
				off,
				len;

	if (fwd_parse_trust_list(list, strlen(list), out, capacity, &count,
							 &off, &len) != FWD_RANGE_OK)
	{
		printf("Bail out! bad trust list in a test: %s\n", list);
		exit(1);
	}
	return count;
}

static FwdAddr
addr(const char *text)
{
	FwdAddr		a;

	if (!(strchr(text, ':') ? fwd_parse_ipv6(text, strlen(text), &a) :
		  fwd_parse_ipv4(text, strlen(text), &a)))
	{
		printf("Bail out! bad address in a test: %s\n", text);
		exit(1);
	}
	return a;
}

static void
check_list(const char *list, FwdRangeStatus want_status, const char *want)
{
	FwdRange	ranges[8];
	size_t		count = 0,
				off = 0,
				len = 0;
	FwdRangeStatus status;
	char		got[256];
	size_t		n = 0;
	size_t		i;

	status = fwd_parse_trust_list(list, strlen(list), ranges, 8, &count,
								  &off, &len);
	if (status != FWD_RANGE_OK)
		snprintf(got, sizeof(got), "error %d at \"%.*s\"", (int) status,
				 (int) len, list + off);
	else
	{
		got[0] = '\0';
		for (i = 0; i < count; i++)
		{
			char		buf[FWD_TEXT_SIZE];

			fwd_format_addr(&ranges[i].addr, buf);
			n += snprintf(got + n, sizeof(got) - n, "%s%s%s/%d", i ? " " : "",
						  ranges[i].addr.family == FWD_IPV4 ? "v4:" : "v6:",
						  buf, ranges[i].bits);
		}
	}
	if (want_status == FWD_RANGE_OK)
		is_text(got, want, list);
	else
	{
		char		expect[256];

		snprintf(expect, sizeof(expect), "error %d at \"%s\"",
				 (int) want_status, want);
		is_text(got, expect, list);
	}
}

static void
check_key(const char *ip, int prefix, const char *want)
{
	FwdAddr		a = addr(ip);
	char		buf[FWD_TEXT_SIZE];
	char		what[128];

	snprintf(what, sizeof(what), "key of %s prefix %d", ip, prefix);
	is_text(fwd_ip_key(&a, prefix, buf) ? buf : "-", want, what);
}

static void
test_ipv4(void)
{
	check_ipv4("1.2.3.4", "1.2.3.4");
	check_ipv4("255.255.255.255", "255.255.255.255");
	check_ipv4("0.0.0.0", "0.0.0.0");
	check_ipv4("10.0.0.1", "10.0.0.1");
	check_ipv4("256.1.1.1", "-");
	check_ipv4("01.1.1.1", "-");
	check_ipv4("00.1.1.1", "-");
	check_ipv4("1.1.1.010", "-");
	check_ipv4("1.1.1", "-");
	check_ipv4("1.1.1.1.1", "-");
	check_ipv4("0x7f.0.0.1", "-");
	check_ipv4("2130706433", "-");
	check_ipv4("1.1.1.1 ", "-");
	check_ipv4("", "-");
	check_ipv4("1..1.1", "-");
	check_ipv4("1.1.1.", "-");
	check_ipv4("+1.1.1.1", "-");
	check_ipv4("1234.1.1.1", "-");
	check_ipv4("1.1.1.1000", "-");
}

static void
test_ipv6(void)
{
	check_ipv6("::", "::");
	check_ipv6("::1", "::1");
	check_ipv6("1::", "1::");
	check_ipv6("2001:db8::1", "2001:db8::1");
	check_ipv6("2001:DB8:0:0:0:0:0:1", "2001:db8::1");
	check_ipv6("0001:0db8::", "1:db8::");
	check_ipv6("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8");
	check_ipv6("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0");
	check_ipv6("::2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8");
	check_ipv6("1:0:0:2:0:0:0:3", "1:0:0:2::3");
	check_ipv6("1:0:0:2:0:0:3:4", "1::2:0:0:3:4");
	check_ipv6("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7");
	check_ipv6("::ffff:1.2.3.4", "::ffff:102:304");
	check_ipv6("1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304");
	check_ipv6("64:ff9b::192.0.2.1", "64:ff9b::c000:201");
	check_ipv6(":", "-");
	check_ipv6(":::", "-");
	check_ipv6("1:::2", "-");
	check_ipv6("1::2::3", "-");
	check_ipv6("1:2:3:4:5:6:7:8:9", "-");
	check_ipv6("1:2:3:4:5:6:7:8::", "-");
	check_ipv6("::1:2:3:4:5:6:7:8", "-");
	check_ipv6("1:2:3:4::5:6:7:8", "-");
	check_ipv6("12345::", "-");
	check_ipv6("1:2:3:4:5:6:7", "-");
	check_ipv6(":1::", "-");
	check_ipv6("1::2:", "-");
	check_ipv6("g::", "-");
	check_ipv6("::1.2.3", "-");
	check_ipv6("::01.2.3.4", "-");
	check_ipv6("1:2:3:4:5:6:7:1.2.3.4", "-");
	check_ipv6("1.2.3.4::", "-");
	check_ipv6("::1.2.3.4:5", "-");
	check_ipv6("[::1]", "-");
	check_ipv6("::1%eth0", "-");
	check_ipv6("", "-");
}

/* One X-Forwarded-For entry at a time: the node rules of the design. */
static void
test_xff_nodes(void)
{
	char		entry[128];

	check_xff("1.2.3.4", "1.2.3.4 .");
	check_xff("1.2.3.4:80", "1.2.3.4 .");
	check_xff("1.2.3.4:65535", "1.2.3.4 .");
	check_xff("1.2.3.4:1", "1.2.3.4 .");
	check_xff("1.2.3.4:0", "!");
	check_xff("1.2.3.4:65536", "!");
	check_xff("1.2.3.4:080", "!");
	check_xff("1.2.3.4:", "!");
	check_xff("1.2.3.4:80:80", "!");
	check_xff("2001:db8::1", "2001:db8::1 .");
	check_xff("2001:db8::1:443", "2001:db8::1:443 .");
	check_xff("[2001:db8::1]", "2001:db8::1 .");
	check_xff("[2001:db8::1]:443", "2001:db8::1 .");
	check_xff("[2001:db8::1]:", "!");
	check_xff("[2001:db8::1]x", "!");
	check_xff("[2001:db8::1", "!");
	check_xff("[1.2.3.4]", "!");
	check_xff("[1.2.3.4]:80", "!");
	check_xff("fe80::1%eth0", "fe80::1 .");
	check_xff("[fe80::1%eth0]:8080", "fe80::1 .");
	check_xff("fe80::1%25eth0", "fe80::1 .");
	check_xff("fe80::1%a.b_c~d-9", "fe80::1 .");
	check_xff("fe80::1%", "!");
	check_xff("fe80::1%eth/0", "!");
	check_xff("fe80::1%eth%0", "!");
	check_xff("1.2.3.4%eth0", "!");
	check_xff("::ffff:1.2.3.4", "1.2.3.4 .");
	check_xff("::ffff:102:304", "1.2.3.4 .");
	check_xff("[::ffff:1.2.3.4]:80", "1.2.3.4 .");
	check_xff("::ffff:0.0.0.0", "!");
	check_xff("64:ff9b::102:304", "64:ff9b::102:304 .");
	check_xff("::102:304", "::102:304 .");
	check_xff("0.0.0.0", "!");
	check_xff("::", "!");
	check_xff("[::]:80", "!");
	check_xff("unknown", "!");
	check_xff("_hidden", "!");
	check_xff("localhost", "!");
	check_xff("10.0.0.0/8", "!");
	check_xff("\"1.2.3.4\"", "!");
	check_xff("1.2.3.4 5.6.7.8", "!");
	check_xff("1.2.3.4\r", "!");
	check_xff("010.1.1.1", "!");

	/* 64 bytes after trimming is still an entry; 65 is not */
	snprintf(entry, sizeof(entry), " [fe80::1%%%s]:65535\t",
			 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv");
	check_xff(entry, "fe80::1 .");
	snprintf(entry, sizeof(entry), " [fe80::1%%%s]:65535\t",
			 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw");
	check_xff(entry, "!");
}

static void
test_xff_lists(void)
{
	check_xff("", ".");
	check_xff(" \t ", ".");
	check_xff(",, ,\t,", ".");
	check_xff(" 1.2.3.4 ,\t,, 5.6.7.8\t", "5.6.7.8 1.2.3.4 .");
	check_xff("1.2.3.4,5.6.7.8", "5.6.7.8 1.2.3.4 .");
	check_xff("junk, 1.2.3.4", "1.2.3.4 !");
	check_xff("1.2.3.4, junk, 5.6.7.8", "5.6.7.8 !");
	check_xff("[2001:db8::1]:1, 1.2.3.4:2", "1.2.3.4 2001:db8::1 .");
}

static void
test_forwarded(void)
{
	check_forwarded("for=192.0.2.60;proto=http;by=203.0.113.43, "
					"For=\"[2001:db8:cafe::17]:4711\"",
					"2001:db8:cafe::17 192.0.2.60 .");
	check_forwarded("for=1.2.3.4", "1.2.3.4 .");
	check_forwarded("FOR=1.2.3.4", "1.2.3.4 .");
	check_forwarded("fOr=1.2.3.4", "1.2.3.4 .");
	check_forwarded("for=\"1.2.3.4\"", "1.2.3.4 .");
	check_forwarded("for=\"1.2.3.4:8080\"", "1.2.3.4 .");
	check_forwarded("for=1.2.3.4:8080", "!");
	check_forwarded("for=\"[2001:db8::1]\"", "2001:db8::1 .");
	check_forwarded("for=\"[2001:db8::1]:443\"", "2001:db8::1 .");
	check_forwarded("for=\"2001:db8::1\"", "!");
	check_forwarded("for=[2001:db8::1]", "!");
	check_forwarded("for=\"[::ffff:1.2.3.4]\"", "1.2.3.4 .");
	check_forwarded("for=unknown", "!");
	check_forwarded("for=\"unknown\"", "!");
	check_forwarded("for=_hidden", "!");
	check_forwarded("for=\"_hidden:80\"", "!");
	check_forwarded("proto=http", "!");
	check_forwarded("for=1.2.3.4;for=5.6.7.8", "!");
	check_forwarded("for = 1.2.3.4", "!");
	check_forwarded("for =1.2.3.4", "!");
	check_forwarded("for= 1.2.3.4", "!");
	check_forwarded("for=1.2.3.4 ; proto=http", "1.2.3.4 .");
	check_forwarded("proto=http;for=1.2.3.4;", "1.2.3.4 .");
	check_forwarded("for=1.2.3.4;;by=x", "1.2.3.4 .");
	check_forwarded(";", "!");
	check_forwarded("for=", "!");
	check_forwarded("=1.2.3.4", "!");
	check_forwarded("for=\"\"", "!");
	check_forwarded("for=\"\\[::1\\]\"", "!");
	check_forwarded("for=\"1.2.3.4", "!");
	check_forwarded("for=1.2.3.4\"", "!");
	check_forwarded("\"for=1.2.3.4\"", "!");
	check_forwarded("for=\"1.2.3.4\x01\"", "!");
	check_forwarded("f\x7fr=1.2.3.4", "!");
	/* an injected quote stays in the element it was written in */
	check_forwarded("for=\"x, for=5.6.7.8", "5.6.7.8 !");
	check_forwarded("for=1.1.1.1, for=\"x, for=5.6.7.8", "5.6.7.8 !");
	check_forwarded("for=\"x, for=, for=\"[2001:db8::1]\"", "2001:db8::1 !");
	check_forwarded("by=\"a,b\";for=1.2.3.4", "1.2.3.4 .");
	check_forwarded("for=1.2.3.4;by=\"a\\\"b\"", "1.2.3.4 .");
	check_forwarded("for=1.2.3.4;by=\"a\\\\\"", "1.2.3.4 .");
	check_forwarded("for=1.2.3.4;by=\"a\\\"", "!");
	check_forwarded("for=1.2.3.4;by=\"\xc3\xa9\"", "1.2.3.4 .");
	check_forwarded(",, for=1.2.3.4 ,\t", "1.2.3.4 .");
	check_forwarded("for=1.2.3.4,for=5.6.7.8", "5.6.7.8 1.2.3.4 .");
	check_forwarded("for=1.2.3.4 for=5.6.7.8", "!");
}

static void
test_trust_lists(void)
{
	check_list("", FWD_RANGE_OK, "");
	check_list(" \t ", FWD_RANGE_OK, "");
	check_list("10.0.0.0/8, 2001:db8::/32", FWD_RANGE_OK,
			   "v4:10.0.0.0/8 v6:2001:db8::/32");
	check_list("\t1.2.3.4 ,::1", FWD_RANGE_OK, "v4:1.2.3.4/32 v6:::1/128");
	check_list("::ffff:10.0.0.0/104", FWD_RANGE_OK, "v4:10.0.0.0/8");
	check_list("::ffff:1.2.3.4", FWD_RANGE_OK, "v4:1.2.3.4/32");
	check_list("::ffff:0.0.0.0/97", FWD_RANGE_OK, "v4:0.0.0.0/1");
	check_list("::/96", FWD_RANGE_OK, "v6:::/96");
	check_list("64:ff9b::/96", FWD_RANGE_OK, "v6:64:ff9b::/96");
	check_list("0.0.0.0/0", FWD_RANGE_ZERO_PREFIX, "0.0.0.0/0");
	check_list("10.0.0.0/8, ::/0", FWD_RANGE_ZERO_PREFIX, "::/0");
	check_list("::ffff:0:0/96", FWD_RANGE_ALL_MAPPED, "::ffff:0:0/96");
	check_list("::ffff:0.0.0.0/96", FWD_RANGE_ALL_MAPPED, "::ffff:0.0.0.0/96");
	check_list("::fffe:0:0/95", FWD_RANGE_ALL_MAPPED, "::fffe:0:0/95");
	check_list("::ffff:0:0/95", FWD_RANGE_HOST_BITS, "::ffff:0:0/95");
	check_list("::/64", FWD_RANGE_ALL_MAPPED, "::/64");
	check_list("::/1", FWD_RANGE_ALL_MAPPED, "::/1");
	check_list("10.0.0.1/8", FWD_RANGE_HOST_BITS, "10.0.0.1/8");
	check_list("2001:db8::1/64", FWD_RANGE_HOST_BITS, "2001:db8::1/64");
	check_list("10.0.0.0/33", FWD_RANGE_BAD_PREFIX, "10.0.0.0/33");
	check_list("::/129", FWD_RANGE_BAD_PREFIX, "::/129");
	check_list("10.0.0.0/08", FWD_RANGE_SYNTAX, "10.0.0.0/08");
	check_list("10.0.0.0/", FWD_RANGE_SYNTAX, "10.0.0.0/");
	check_list("10.0.0.0/8/8", FWD_RANGE_SYNTAX, "10.0.0.0/8/8");
	check_list("10.0.0.0/8,", FWD_RANGE_SYNTAX, "");
	check_list("10.0.0.0/8,, ::1", FWD_RANGE_SYNTAX, "");
	check_list("10.0.0.0/8, junk", FWD_RANGE_SYNTAX, "junk");
	check_list("10/8", FWD_RANGE_SYNTAX, "10/8");
	check_list("fe80::1%eth0", FWD_RANGE_SYNTAX, "fe80::1%eth0");
	check_list("[::1]", FWD_RANGE_SYNTAX, "[::1]");
	check_list("10.0.0.0 /8", FWD_RANGE_SYNTAX, "10.0.0.0 /8");
}

static void
test_ranges(void)
{
	FwdRange	r[4];
	FwdAddr		a;

	trust("10.0.0.0/8, 2001:db8::/32, ::ffff:192.168.0.0/112", r, 4);
	a = addr("10.255.0.1");
	ok(fwd_range_contains(&r[0], &a), "10.0.0.0/8 holds 10.255.0.1");
	a = addr("11.0.0.1");
	ok(!fwd_range_contains(&r[0], &a), "10.0.0.0/8 does not hold 11.0.0.1");
	a = addr("::ffff:10.0.0.1");
	ok(!fwd_range_contains(&r[0], &a),
	   "a range compares mapped addresses only once they are unmapped");
	a = addr("2001:db8:ffff::1");
	ok(fwd_range_contains(&r[1], &a), "2001:db8::/32 holds 2001:db8:ffff::1");
	a = addr("2001:db9::1");
	ok(!fwd_range_contains(&r[1], &a), "2001:db8::/32 does not hold 2001:db9::1");
	a = addr("192.168.3.4");
	ok(fwd_range_contains(&r[2], &a), "::ffff:192.168.0.0/112 holds 192.168.3.4");
}

static void
test_walk(void)
{
	FwdRange	r[4];
	size_t		n = trust("10.0.0.0/8, 2001:db8::/32", r, 4);
	FwdAddr		peer = addr("10.0.0.1");
	FwdAddr		mapped_peer = addr("::ffff:10.0.0.1");
	FwdAddr		stranger = addr("192.0.2.1");
	FwdAddr		got;
	const char *h;
	char		buf[FWD_TEXT_SIZE];

	h = "1.2.3.4";
	got = fwd_client_addr(FWD_HEADER_XFF, &stranger, h, strlen(h), r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "192.0.2.1", "an untrusted peer keeps its address");

	h = "9.9.9.9, 1.2.3.4, 10.0.0.2";
	got = fwd_client_addr(FWD_HEADER_XFF, &peer, h, strlen(h), r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "1.2.3.4", "the first untrusted entry from the right");

	got = fwd_client_addr(FWD_HEADER_XFF, &mapped_peer, h, strlen(h), r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "1.2.3.4", "a mapped peer is unmapped before the trust check");

	got = fwd_client_addr(FWD_HEADER_XFF, &mapped_peer, "", 0, r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "10.0.0.1", "the answer is unmapped too");

	got = fwd_client_addr(FWD_HEADER_XFF, &peer, NULL, 0, r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "10.0.0.1", "no header answers the peer");

	h = "1.2.3.4, 10.0.0.9, junk, 10.0.0.2";
	got = fwd_client_addr(FWD_HEADER_XFF, &peer, h, strlen(h), r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "10.0.0.2", "a malformed entry answers the hop that wrote it");

	h = "for=1.2.3.4, for=\"[2001:db8::5]:80\"";
	got = fwd_client_addr(FWD_HEADER_FORWARDED, &peer, h, strlen(h), r, n);
	fwd_format_addr(&got, buf);
	is_text(buf, "1.2.3.4", "Forwarded walks by the same rules");

	got = fwd_client_addr(FWD_HEADER_XFF, &peer, h, strlen(h), NULL, 0);
	fwd_format_addr(&got, buf);
	is_text(buf, "10.0.0.1", "an empty trust list trusts nobody");
}

/*
 * A header whose first left_len bytes lie on memory that cannot be read,
 * followed by tail; the walk must answer without touching the left part.
 * Returns the answer's text.
 */
static const char *
walk_guarded(FwdHeaderKind kind, size_t left_len, const char *tail,
			 const char *peer, const char *trusted)
{
	static char buf[FWD_TEXT_SIZE];
	size_t		page = (size_t) sysconf(_SC_PAGESIZE);
	size_t		tail_len = strlen(tail);
	size_t		left_pages = (left_len + page - 1) / page;
	size_t		tail_pages = (tail_len + page - 1) / page + 1;
	char	   *map;
	char	   *readable;
	FwdRange	r[4];
	size_t		n = trust(trusted, r, 4);
	FwdAddr		remote = addr(peer);
	FwdAddr		got;

	map = mmap(NULL, (left_pages + tail_pages) * page, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
	{
		printf("Bail out! mmap failed\n");
		exit(1);
	}
	readable = map + left_pages * page;
	mprotect(readable, tail_pages * page, PROT_READ | PROT_WRITE);
	memcpy(readable, tail, tail_len);
	mprotect(readable, tail_pages * page, PROT_READ);

	got = fwd_client_addr(kind, &remote, readable - left_len,
						  left_len + tail_len, r, n);
	fwd_format_addr(&got, buf);
	munmap(map, (left_pages + tail_pages) * page);
	return buf;
}

static void
test_bounded(void)
{
	char		tail[4096];
	size_t		n = 0;
	int			i;

	is_text(walk_guarded(FWD_HEADER_XFF, 1 << 20, ", 1.2.3.4, 10.0.0.2",
						 "10.0.0.1", "10.0.0.0/8"),
			"1.2.3.4", "XFF: the megabyte left of the answer is never read");
	is_text(walk_guarded(FWD_HEADER_FORWARDED, 1 << 20,
						 ", for=1.2.3.4, for=10.0.0.2", "10.0.0.1", "10.0.0.0/8"),
			"1.2.3.4", "Forwarded: the megabyte left of the answer is never read");
	is_text(walk_guarded(FWD_HEADER_XFF, 1 << 20,
						 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
						 ", 10.0.0.2", "10.0.0.1", "10.0.0.0/8"),
			"10.0.0.2", "XFF: a long entry is read no further than its 65th byte");

	/* 64 trusted entries readable, more trusted ones unreadable on the left */
	n += snprintf(tail + n, sizeof(tail) - n, ",");
	for (i = 64; i >= 1; i--)
		n += snprintf(tail + n, sizeof(tail) - n, "%s10.0.1.%d", i < 64 ? ", " : "", i);
	is_text(walk_guarded(FWD_HEADER_XFF, 1 << 20, tail, "10.0.0.1", "10.0.0.0/8"),
			"10.0.1.64", "XFF: the walk stops after 64 trusted entries");

	n = 0;
	n += snprintf(tail + n, sizeof(tail) - n, ",");
	for (i = 64; i >= 1; i--)
		n += snprintf(tail + n, sizeof(tail) - n, "%sfor=10.0.1.%d;proto=https",
					  i < 64 ? ", " : "", i);
	is_text(walk_guarded(FWD_HEADER_FORWARDED, 1 << 20, tail, "10.0.0.1",
						 "10.0.0.0/8"),
			"10.0.1.64", "Forwarded: the walk stops after 64 trusted entries");

	/* one hop fewer and the walk reaches the client */
	n = 0;
	n += snprintf(tail + n, sizeof(tail) - n, "1.2.3.4");
	for (i = 63; i >= 1; i--)
		n += snprintf(tail + n, sizeof(tail) - n, ", 10.0.1.%d", i);
	is_text(walk_guarded(FWD_HEADER_XFF, 0, tail, "10.0.0.1", "10.0.0.0/8"),
			"1.2.3.4", "XFF: 63 trusted entries are walked through");
}

static void
test_keys(void)
{
	check_key("1.2.3.4", 64, "1.2.3.4");
	check_key("1.2.3.4", 1, "1.2.3.4");
	check_key("1.2.3.4", 128, "1.2.3.4");
	check_key("::ffff:1.2.3.4", 64, "1.2.3.4");
	check_key("2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64");
	check_key("2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48");
	check_key("2001:db8:1:ab12::", 56, "2001:db8:1:ab00::/56");
	check_key("2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6/128");
	check_key("2001:db8:1:2:3:4:5:6", 1, "::/1");
	check_key("8000::1", 1, "8000::/1");
	check_key("2001:db8:0:0:1::1", 128, "2001:db8::1:0:0:1/128");
	check_key("64:ff9b::102:304", 128, "64:ff9b::102:304/128");
	check_key("::102:304", 96, "::/96");
	check_key("::1", 64, "::/64");
	check_key("2001:db8::1", 0, "-");
	check_key("2001:db8::1", 129, "-");
	check_key("2001:db8::1", -1, "-");
	check_key("1.2.3.4", 0, "-");
	check_key("1.2.3.4", 129, "-");
}

int
main(void)
{
	test_ipv4();
	test_ipv6();
	test_xff_nodes();
	test_xff_lists();
	test_forwarded();
	test_trust_lists();
	test_ranges();
	test_walk();
	test_bounded();
	test_keys();
	printf("1..%d\n", tests_run);
	return 0;
}
