/*
 * http.c
 *		rl_headers: a decision as the HTTP fields of the IETF RateLimit draft
 *		(draft-ietf-httpapi-ratelimit-headers-11) and Retry-After, as a jsonb
 *		object of field name to field value; and rl_guard, PostgREST's
 *		pre-request check, whose denial carries those fields.
 *
 * The values are structured-field Lists of one Item: the limiter's name as
 * an sf-string with parameters q and w (RateLimit-Policy), r and t
 * (RateLimit).  An sf-string holds printable ASCII only, with " and \
 * escaped, so any other name is refused rather than mangled.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "executor/executor.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "ratelimit.h"

PG_FUNCTION_INFO_V1(rl_headers);
PG_FUNCTION_INFO_V1(rl_headers_policy);
PG_FUNCTION_INFO_V1(rl_guard);

/* PostgREST turns an error of this SQLSTATE into the HTTP response it names */
#define ERRCODE_POSTGREST_RESPONSE MAKE_SQLSTATE('P','G','R','S','T')

/* The fields of rl_decision the headers use. */
typedef struct HeaderDecision
{
	bool		allowed;
	int32		remaining;
	bool		retry_known;
	int64		retry_after_us;
	int64		reset_after_us;
} HeaderDecision;

/*
 * Whole seconds, rounded up, of a positive number of microseconds (any
 * int64: adding a second's worth first would wrap near the largest).
 */
static int64
ceil_seconds(int64 us)
{
	return us / USECS_PER_SEC + (us % USECS_PER_SEC != 0);
}

/* A field of d in seconds as microseconds: finite and not negative. */
static int64
decision_us(HeapTupleHeader d, const char *field, bool *isnull)
{
	Datum		value = GetAttributeByName(d, field, isnull);
	double		s;

	if (*isnull)
		return 0;
	s = DatumGetFloat8(value);
	if (isnan(s) || s < 0 || s > (double) (PG_INT64_MAX / USECS_PER_SEC))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("d.%s must be a number of seconds, not %s",
						field, float8out_internal(s))));
	/* the decision's seconds came from whole microseconds: round back */
	return (int64) llround(s * USECS_PER_SEC);
}

static HeaderDecision
read_decision(FunctionCallInfo fcinfo)
{
	HeapTupleHeader d;
	HeaderDecision hd;
	bool		isnull;

	require_argument(fcinfo, 0, "d");
	d = PG_GETARG_HEAPTUPLEHEADER(0);

	hd.allowed = DatumGetBool(GetAttributeByName(d, "allowed", &isnull));
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("d.allowed must not be null")));
	hd.remaining = DatumGetInt32(GetAttributeByName(d, "remaining", &isnull));
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("d.remaining must not be null")));
	hd.reset_after_us = decision_us(d, "reset_after", &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("d.reset_after must not be null")));
	/* NULL: a denial that can never be allowed (cost > burst) */
	hd.retry_after_us = decision_us(d, "retry_after", &isnull);
	hd.retry_known = !isnull;
	return hd;
}

/*
 * The limiter as an sf-string: printable ASCII (%x20-7E) only, " and \
 * escaped with a backslash.
 */
static char *
limiter_sf_string(text *limiter)
{
	const char *p = VARDATA_ANY(limiter);
	int			len = VARSIZE_ANY_EXHDR(limiter);
	int			i;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '"');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) p[i];

		if (c < 0x20 || c > 0x7e)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("limiter must be printable ASCII to name an HTTP rate limit"),
					 errdetail("Byte %d of limiter is 0x%02x.", i + 1, c),
					 errhint("Use a name of the characters 0x20 to 0x7E.")));
		if (c == '"' || c == '\\')
			appendStringInfoChar(&buf, '\\');
		appendStringInfoChar(&buf, (char) c);
	}
	appendStringInfoChar(&buf, '"');
	return buf.data;
}

/* name: value in the JSON object that starts at json->data[start] */
static void
append_field(StringInfo json, int start, const char *name, const char *value)
{
	if (json->len > start + 1)
		appendStringInfoChar(json, ',');
	escape_json(json, name);
	appendStringInfoChar(json, ':');
	escape_json(json, value);
}

/*
 * The fields for decision d of the limiter named name (an sf-string) under
 * the limit (rate, burst), as the text of a JSON object appended to json:
 * the body of both forms of rl_headers and of rl_guard's denial.  Answers
 * the Retry-After seconds, or -1 when there is none.
 */
static int64
headers_json(StringInfo json, const HeaderDecision *d, const char *name,
			 double rate, int32 burst)
{
	GcraLimit	limit = {0};
	GcraError	error;
	StringInfoData value;
	int64		T;
	int64		window;
	int64		next_cell_s = 0;
	int64		retry_s = -1;
	int			start = json->len;

	error = gcra_limit_init(&limit, rate, burst, GetCurrentTimestamp(),
							END_TIMESTAMP - 1);
	if (error != GCRA_OK)
		refuse_limit(error, rate, burst, 0);
	T = limit.interval_us;
	if (d->remaining < 0 || d->remaining > burst)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("d.remaining must be between 0 and burst, not %d",
						d->remaining),
				 errdetail("burst is %d.", burst),
				 errhint("Pass the limit the decision was made with.")));

	initStringInfo(&value);
	appendStringInfoChar(json, '{');

	/* the window in which burst requests fit: w = max(1, ceil(burst / rate)) */
	window = (int64) Max(1.0, ceil((double) burst / rate));
	appendStringInfo(&value, "%s;q=%d;w=" INT64_FORMAT, name, burst, window);
	append_field(json, start, "RateLimit-Policy", value.data);

	/*
	 * Seconds until the next cell is back.  reset_after is the debt
	 * D = tat - now (0: the bucket is full, and nothing is coming back).
	 * A cell comes back each T, and the cells missing are ceil(D / T) (that is
	 * burst - remaining, as remaining = floor((tau - D) / T) with tau =
	 * burst * T), so the first of them is back once the debt falls to
	 * (ceil(D / T) - 1) * T: after D - (ceil(D / T) - 1) * T, which is D mod
	 * T, or T when D is a whole number of cells.  It is 1 to T microseconds,
	 * so t is at least 1; a refill under a second reads t=1.  Taken from D
	 * rather than from remaining, t stays right when remaining was clamped.
	 */
	resetStringInfo(&value);
	appendStringInfo(&value, "%s;r=%d", name, d->remaining);
	if (d->reset_after_us > 0)
	{
		int64		back_us = d->reset_after_us % T;

		if (back_us == 0)
			back_us = T;
		next_cell_s = ceil_seconds(back_us);
		appendStringInfo(&value, ";t=" INT64_FORMAT, next_cell_s);
	}
	append_field(json, start, "RateLimit", value.data);

	/*
	 * A denial that can be retried: Retry-After, never earlier than t (a
	 * cost of one is retried exactly when the next cell is back, a larger
	 * one later, so only rounding could put it before t).
	 */
	if (!d->allowed && d->retry_known)
	{
		retry_s = Max(ceil_seconds(d->retry_after_us), next_cell_s);
		resetStringInfo(&value);
		appendStringInfo(&value, INT64_FORMAT, retry_s);
		append_field(json, start, "Retry-After", value.data);
	}

	appendStringInfoChar(json, '}');
	pfree(value.data);
	return retry_s;
}

static Datum
headers(const HeaderDecision *d, const char *name, double rate, int32 burst)
{
	StringInfoData json;

	initStringInfo(&json);
	(void) headers_json(&json, d, name, rate, burst);
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(json.data)));
}

/* rl_headers(d rl_decision, limiter text, rate double precision, burst integer) */
Datum
rl_headers(PG_FUNCTION_ARGS)
{
	HeaderDecision d = read_decision(fcinfo);
	char	   *name = limiter_sf_string(required_text_argument(fcinfo, 1, "limiter"));

	require_argument(fcinfo, 2, "rate");
	require_argument(fcinfo, 3, "burst");
	return headers(&d, name, PG_GETARG_FLOAT8(2), PG_GETARG_INT32(3));
}

/* rl_headers(d rl_decision, limiter text): the limit of the limiter's policy */
Datum
rl_headers_policy(PG_FUNCTION_ARGS)
{
	HeaderDecision d = read_decision(fcinfo);
	text	   *limiter = required_text_argument(fcinfo, 1, "limiter");
	char	   *name = limiter_sf_string(limiter);
	Policy		policy = policy_lookup(fcinfo->flinfo->fn_oid, limiter);

	return headers(&d, name, policy.rate, policy.burst);
}

/*
 * rl_guard(limiter, key, cost): take by the limiter's policy.  Allowed, it
 * returns; denied, it raises the error PostgREST answers as HTTP 429: the
 * message is the response's JSON body, the detail its status and headers.
 * In C, like rl_take: it finds rl_policies and rl_buckets in its own schema,
 * never by a schema name that ALTER SCHEMA ... RENAME changes and another
 * role could then take.
 */
Datum
rl_guard(PG_FUNCTION_ARGS)
{
	text	   *limiter = required_text_argument(fcinfo, 0, "limiter");
	text	   *key = required_text_argument(fcinfo, 1, "key");
	Policy		policy;
	GcraDecision d;
	HeaderDecision hd;
	StringInfoData fields;
	StringInfoData body;
	StringInfoData detail;
	StringInfoData text;
	int64		retry_s;

	require_argument(fcinfo, 2, "cost");
	d = policy_take(fcinfo->flinfo->fn_oid, "rl_guard", limiter, key,
					PG_GETARG_INT32(2), DECIDE_NOW, &policy);
	if (d.allowed || policy.shadow)
		PG_RETURN_VOID();

	hd.allowed = false;
	hd.remaining = d.remaining;
	hd.retry_known = d.retry_known;
	hd.retry_after_us = d.retry_after_us;
	hd.reset_after_us = d.reset_after_us;
	initStringInfo(&fields);
	retry_s = headers_json(&fields, &hd, limiter_sf_string(limiter),
						   policy.rate, policy.burst);

	/* the texts of 1.1's json_build_object and jsonb, byte for byte */
	initStringInfo(&detail);
	appendStringInfo(&detail, "{\"status\" : 429, \"headers\" : %s}",
					 DatumGetCString(DirectFunctionCall1(jsonb_out,
														 DirectFunctionCall1(jsonb_in,
																			 CStringGetDatum(fields.data)))));
	initStringInfo(&body);
	initStringInfo(&text);
	appendStringInfoString(&body, "{\"code\" : \"RL429\", \"message\" : \"Too Many Requests\", \"details\" : ");
	appendStringInfo(&text, "The rate limit %s is exhausted.", text_to_cstring(limiter));
	escape_json(&body, text.data);
	appendStringInfoString(&body, ", \"hint\" : ");
	resetStringInfo(&text);
	if (retry_s >= 0)
		appendStringInfo(&text, "Retry in " INT64_FORMAT " seconds.", retry_s);
	else
		appendStringInfoString(&text, "This request costs more than the limit ever allows.");
	escape_json(&body, text.data);
	appendStringInfoChar(&body, '}');

	ereport(ERROR,
			(errcode(ERRCODE_POSTGREST_RESPONSE),
			 errmsg_internal("%s", body.data),
			 errdetail_internal("%s", detail.data)));
	PG_RETURN_VOID();
}
