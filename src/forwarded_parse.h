/*
 * forwarded_parse.h
 *		Client addresses behind trusted proxies: parsing of X-Forwarded-For
 *		and RFC 7239 Forwarded, trusted ranges, and IP rate-limit keys.
 *
 * Pure C with no PostgreSQL includes, so that the extension, the C unit tests
 * and the fuzz target use the same code.  Everything here is written for
 * hostile input: a header is a pointer and a length (no NUL needed), nothing
 * is allocated, nothing is read outside [header, header + len), and a header
 * is read from its end, never further left than the walk needs.
 */
#ifndef RATELIMIT_FORWARDED_PARSE_H
#define RATELIMIT_FORWARDED_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An entry longer than this after trimming is malformed: the walk stops. */
#define FWD_MAX_ENTRY_LEN 64
/* The walk stops after this many trusted entries (the peer not counted). */
#define FWD_MAX_TRUSTED_HOPS 64
/* Room for any text fwd_format_addr or fwd_ip_key writes, NUL included. */
#define FWD_TEXT_SIZE 48

typedef enum FwdFamily
{
	FWD_IPV4 = 4,
	FWD_IPV6 = 6
} FwdFamily;

/* An address; IPv4 uses the first four bytes.  Network byte order. */
typedef struct FwdAddr
{
	FwdFamily	family;
	uint8_t		bytes[16];
} FwdAddr;

/* A trusted range: the first bits bits of addr. */
typedef struct FwdRange
{
	FwdAddr		addr;
	int			bits;
} FwdRange;

typedef enum FwdRangeStatus
{
	FWD_RANGE_OK = 0,
	FWD_RANGE_SYNTAX,			/* not an address with an optional /prefix */
	FWD_RANGE_BAD_PREFIX,		/* prefix length too long for the family */
	FWD_RANGE_HOST_BITS,		/* bits set right of the prefix length */
	FWD_RANGE_ZERO_PREFIX,		/* /0: trusts every address of its family */
	FWD_RANGE_ALL_MAPPED		/* covers ::ffff:0:0/96: trusts all of IPv4 */
} FwdRangeStatus;

typedef enum FwdHeaderKind
{
	FWD_HEADER_XFF,				/* X-Forwarded-For: comma-separated nodes */
	FWD_HEADER_FORWARDED		/* RFC 7239: the for= of each element */
} FwdHeaderKind;

/* Reads a header's nodes from right to left. */
typedef struct FwdCursor
{
	FwdHeaderKind kind;
	const char *header;
	size_t		unread;			/* header[0 .. unread) is not read yet */
} FwdCursor;

typedef enum FwdStep
{
	FWD_STEP_END,				/* no entries left */
	FWD_STEP_MALFORMED,			/* the next entry is not a valid node */
	FWD_STEP_NODE				/* the next entry's address is in *node */
} FwdStep;

extern bool fwd_parse_ipv4(const char *text, size_t len, FwdAddr *out);
extern bool fwd_parse_ipv6(const char *text, size_t len, FwdAddr *out);
extern void fwd_addr_unmap(FwdAddr *addr);
extern bool fwd_addr_equal(const FwdAddr *a, const FwdAddr *b);

extern FwdRangeStatus fwd_range_normalize(FwdRange *range);
extern bool fwd_range_contains(const FwdRange *range, const FwdAddr *addr);
extern const char *fwd_range_status_detail(FwdRangeStatus status);
extern FwdRangeStatus fwd_parse_trust_list(const char *text, size_t len,
										   FwdRange *out, size_t capacity,
										   size_t *count,
										   size_t *bad_offset,
										   size_t *bad_len);

extern void fwd_cursor_init(FwdCursor *cursor, FwdHeaderKind kind,
							const char *header, size_t len);
extern FwdStep fwd_cursor_next(FwdCursor *cursor, FwdAddr *node);
extern FwdAddr fwd_client_addr(FwdHeaderKind kind, const FwdAddr *remote,
							   const char *header, size_t len,
							   const FwdRange *trusted, size_t ntrusted);

extern size_t fwd_format_addr(const FwdAddr *addr, char *buf);
extern bool fwd_ip_key(const FwdAddr *ip, int ipv6_prefix, char *buf);

#endif							/* RATELIMIT_FORWARDED_PARSE_H */
