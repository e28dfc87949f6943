/*
 * client_ip.c
 *		The SQL face of client addresses behind proxies: rl_client_ip (with a
 *		trusted array, or with ratelimit.trusted_proxies), rl_client_ip_forwarded,
 *		rl_request_ip (PostgREST's request.headers), rl_ip_key, and the setting
 *		ratelimit.trusted_proxies.
 *
 * All parsing is in forwarded_parse.c; this file converts between inet/cidr
 * and the parser's types and turns refused input into errors.  Arguments
 * are checked in the design's order: the trusted ranges first, whatever the
 * other arguments are, then a NULL remote.
 */
#include "postgres.h"

#include <sys/socket.h>

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inet.h"
#include "utils/jsonb.h"

#include "forwarded_parse.h"
#include "pg_compat.h"
#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_client_ip);
PG_FUNCTION_INFO_V1(rl_client_ip_from_setting);
PG_FUNCTION_INFO_V1(rl_client_ip_forwarded);
PG_FUNCTION_INFO_V1(rl_request_ip);
PG_FUNCTION_INFO_V1(rl_ip_key);

/* The ranges of ratelimit.trusted_proxies, parsed once when it is set. */
typedef struct TrustList
{
	size_t		count;
	FwdRange	ranges[FLEXIBLE_ARRAY_MEMBER];
} TrustList;

static char *trusted_proxies_text = NULL;
static const TrustList *trusted_proxies = NULL;

static FwdAddr
addr_from_inet(const inet *ip)
{
	FwdAddr		addr;

	memset(&addr, 0, sizeof(addr));
	addr.family = ip_family(ip) == PGSQL_AF_INET ? FWD_IPV4 : FWD_IPV6;
	memcpy(addr.bytes, ip_addr(ip), ip_addrsize(ip));
	return addr;
}

/* A host address: /32 or /128. */
static inet *
inet_from_addr(const FwdAddr *addr)
{
	inet	   *result = (inet *) palloc0(sizeof(inet));

	ip_family(result) = addr->family == FWD_IPV4 ? PGSQL_AF_INET : PGSQL_AF_INET6;
	ip_bits(result) = ip_maxbits(result);
	memcpy(ip_addr(result), addr->bytes, ip_addrsize(result));
	SET_INET_VARSIZE(result);
	return result;
}

/*
 * The argument trusted as normalized ranges.  NULL or empty trusts nobody;
 * a NULL element or a range that would trust every client is an error.
 */
static FwdRange *
ranges_from_array(FunctionCallInfo fcinfo, int argno, size_t *count)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	FwdRange   *ranges;
	int			i;

	*count = 0;
	if (PG_ARGISNULL(argno))
		return NULL;
	array = PG_GETARG_ARRAYTYPE_P(argno);
	deconstruct_array(array, CIDROID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &nelems);
	ranges = palloc(sizeof(FwdRange) * Max(nelems, 1));
	for (i = 0; i < nelems; i++)
	{
		inet	   *cidr;
		FwdRangeStatus status;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trusted must not contain NULL")));
		cidr = DatumGetInetPP(elems[i]);
		ranges[i].addr = addr_from_inet(cidr);
		ranges[i].bits = ip_bits(cidr);
		status = fwd_range_normalize(&ranges[i]);
		if (status != FWD_RANGE_OK)
		{
			char	   *range_text = DatumGetCString(DirectFunctionCall1(cidr_out,
																		 elems[i]));

			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trusted must not contain %s", range_text),
					 errdetail("%s %s.", range_text, fwd_range_status_detail(status)),
					 errhint("Name only your own proxies.")));
		}
	}
	*count = nelems;
	return ranges;
}

/*
 * The client address behind trusted proxies, from arguments (remote inet,
 * header text); a NULL remote answers NULL, a NULL header has no entries.
 * The header is read in place, never copied.
 */
static Datum
client_ip(FunctionCallInfo fcinfo, FwdHeaderKind kind,
		  const FwdRange *trusted, size_t ntrusted)
{
	FwdAddr		remote;
	FwdAddr		answer;
	const char *header = NULL;
	size_t		len = 0;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	remote = addr_from_inet(PG_GETARG_INET_PP(0));
	if (!PG_ARGISNULL(1))
	{
		text	   *value = PG_GETARG_TEXT_PP(1);

		header = VARDATA_ANY(value);
		len = VARSIZE_ANY_EXHDR(value);
	}
	answer = fwd_client_addr(kind, &remote, header, len, trusted, ntrusted);
	PG_RETURN_INET_P(inet_from_addr(&answer));
}

/* rl_client_ip(remote inet, xff text, trusted cidr[]) RETURNS inet */
Datum
rl_client_ip(PG_FUNCTION_ARGS)
{
	size_t		ntrusted;
	FwdRange   *trusted = ranges_from_array(fcinfo, 2, &ntrusted);

	return client_ip(fcinfo, FWD_HEADER_XFF, trusted, ntrusted);
}

/* rl_client_ip(remote inet, xff text) RETURNS inet: trusts the setting */
Datum
rl_client_ip_from_setting(PG_FUNCTION_ARGS)
{
	if (trusted_proxies == NULL)
		return client_ip(fcinfo, FWD_HEADER_XFF, NULL, 0);
	return client_ip(fcinfo, FWD_HEADER_XFF, trusted_proxies->ranges,
					 trusted_proxies->count);
}

/* rl_client_ip_forwarded(remote inet, forwarded text, trusted cidr[]) */
Datum
rl_client_ip_forwarded(PG_FUNCTION_ARGS)
{
	size_t		ntrusted;
	FwdRange   *trusted = ranges_from_array(fcinfo, 2, &ntrusted);

	return client_ip(fcinfo, FWD_HEADER_FORWARDED, trusted, ntrusted);
}

/*
 * rl_request_ip(trusted cidr[], header text) RETURNS inet: the client of the
 * PostgREST request in progress, from header in request.headers (a JSON
 * object of lower-case names).  PostgREST knows no client address of its
 * own: the header's rightmost entry, written by the proxy in front of it,
 * plays the peer's part in the walk of rl_client_ip, over the entries left of
 * it.  No such header, or no valid rightmost entry: NULL.
 */
Datum
rl_request_ip(PG_FUNCTION_ARGS)
{
	size_t		ntrusted;
	FwdRange   *trusted = ranges_from_array(fcinfo, 0, &ntrusted);
	char	   *name = text_to_cstring(required_text_argument(fcinfo, 1, "header"));
	const char *headers = GetConfigOption("request.headers", true, false);
	Jsonb	   *json;
	JsonbValue	value;
	FwdCursor	cursor;
	FwdAddr		proxy_saw;
	FwdAddr		answer;
	char	   *c;

	if (headers == NULL || headers[0] == '\0')
		PG_RETURN_NULL();
	json = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(headers)));
	for (c = name; *c; c++)
		*c = pg_ascii_tolower((unsigned char) *c);
	if (!JB_ROOT_IS_OBJECT(json) ||
		getKeyJsonValueFromContainer(&json->root, name, strlen(name), &value) == NULL ||
		value.type != jbvString)
		PG_RETURN_NULL();

	fwd_cursor_init(&cursor, FWD_HEADER_XFF, value.val.string.val,
					value.val.string.len);
	if (fwd_cursor_next(&cursor, &proxy_saw) != FWD_STEP_NODE)
		PG_RETURN_NULL();
	answer = fwd_client_addr(FWD_HEADER_XFF, &proxy_saw, value.val.string.val,
							 cursor.unread, trusted, ntrusted);
	PG_RETURN_INET_P(inet_from_addr(&answer));
}

/* rl_ip_key(ip inet, ipv6_prefix integer) RETURNS text, STRICT */
Datum
rl_ip_key(PG_FUNCTION_ARGS)
{
	FwdAddr		ip = addr_from_inet(PG_GETARG_INET_PP(0));
	int32		ipv6_prefix = PG_GETARG_INT32(1);
	char		key[FWD_TEXT_SIZE];

	if (!fwd_ip_key(&ip, ipv6_prefix, key))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ipv6_prefix must be between 1 and 128, not %d",
						ipv6_prefix)));
	PG_RETURN_TEXT_P(cstring_to_text(key));
}

/*
 * Refuse an invalid or trust-all value when it is set, and hand the parsed
 * list to the assign hook, so no call ever parses the setting.
 */
static bool
check_trusted_proxies(char **newval, void **extra, GucSource source)
{
	const char *value = *newval ? *newval : "";
	size_t		len = strlen(value);
	size_t		count;
	size_t		bad_offset;
	size_t		bad_len;
	FwdRangeStatus status;
	TrustList  *list;

	status = fwd_parse_trust_list(value, len, NULL, 0, &count,
								  &bad_offset, &bad_len);
	if (status != FWD_RANGE_OK)
	{
		if (bad_len == 0)
			GUC_check_errdetail("ratelimit.trusted_proxies has an empty entry.");
		else
			GUC_check_errdetail("\"%.*s\" %s.", (int) bad_len, value + bad_offset,
								fwd_range_status_detail(status));
		GUC_check_errhint("Give a comma-separated list of the addresses or CIDR ranges of your own proxies.");
		return false;
	}

	list = rl_guc_extra_malloc(offsetof(TrustList, ranges) + count * sizeof(FwdRange));
	if (list == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		GUC_check_errmsg("out of memory");
		return false;
	}
	fwd_parse_trust_list(value, len, list->ranges, count, &list->count,
						 &bad_offset, &bad_len);
	*extra = list;
	return true;
}

static void
assign_trusted_proxies(const char *newval, void *extra)
{
	trusted_proxies = (const TrustList *) extra;
}

/* Called from _PG_init. */
void
client_ip_define_settings(void)
{
	DefineCustomStringVariable("ratelimit.trusted_proxies",
							   "Proxies whose X-Forwarded-For entries rl_client_ip(remote, xff) trusts.",
							   "A comma-separated list of IPv4 and IPv6 addresses and CIDR ranges; empty trusts nobody.",
							   &trusted_proxies_text,
							   "",
							   PGC_SUSET,
							   GUC_LIST_INPUT,
							   check_trusted_proxies,
							   assign_trusted_proxies,
							   NULL);
}
