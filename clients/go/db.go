// The database side of a decision: the queries, run as unnamed statements
// of the extended protocol (Parse, Bind, Execute and Sync in one round
// trip, so nothing outlives its transaction and PgBouncer's transaction
// pooling works), on a pooled connection, within the deadline.

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

type queries struct {
	take, takePolicy, takeAll, takeAllPolicy, policies, policies12, refund string
}

// The multi-limit queries answer rl_take_all's columns and each request's
// reset_after, in the order of the requests, from rl_take_all_detail
// (ratelimit 1.2), so that an outage continues from every bucket's shared
// fill level.
const (
	decisionColumns = "SELECT allowed, remaining, retry_after, reset_after FROM "
	allColumns      = "SELECT a.allowed, a.remaining, a.retry_after, a.reset_after, a.limiter, " +
		"ARRAY(SELECT r.reset_after FROM unnest(a.requests) WITH ORDINALITY AS r ORDER BY r.ordinality) FROM "
)

// buildQueries writes each @ as the schema, quoted, and a dot (or as
// nothing without a schema).
func buildQueries(schema string) queries {
	prefix := ""
	if schema != "" {
		prefix = `"` + strings.ReplaceAll(schema, `"`, `""`) + `".`
	}
	q := func(s string) string { return strings.ReplaceAll(s, "@", prefix) }
	return queries{
		take:       q(decisionColumns + "@rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)"),
		takePolicy: q(decisionColumns + "@rl_take($1::text, $2::text, $3::int4)"),
		takeAll: q(allColumns +
			"@rl_take_all_detail($1::text[], $2::text[], $3::float8[], $4::int4[], $5::int4[]) AS a"),
		takeAllPolicy: q(allColumns +
			"@rl_take_all_detail($1::text[], $2::text[], $3::int4[]) AS a"),
		policies: q("SELECT limiter, rate, burst, shadow, " + intervalUs("lockout") +
			", lockout_growth, " + intervalUs("lockout_max") + " FROM @rl_policies"),
		policies12: q("SELECT limiter, rate, burst, shadow FROM @rl_policies"),
		refund:     q("SELECT @rl_refund($1::text, $2::text, $3::int4)"),
	}
}

// answer is what the database said, or why it did not.
type answer struct {
	decision Decision
	resets   []float64         // each bucket's reset_after
	policies map[string]policy // rl_policies, when it was read
	refunded bool
	refusal  *Error // bad use: the database refused the call
	failure  string // "" when the database answered
	reason   reason
	busy     bool  // no free connection: load, not a failure of the database
	ended    error // the caller's own context ended: its error, and no decision
}

// textArray is an array literal of strings, every element quoted.
func textArray(items []item, keys bool) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range items {
		s := items[i].limiter
		if keys {
			s = items[i].key
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// numberArray is an array literal of the items' rates (0), bursts (1) or
// costs (2).
func numberArray(items []item, which int) string {
	parts := make([]string, len(items))
	for i := range items {
		switch which {
		case 0:
			// 'g', -1: the server reads back the same double
			parts[i] = strconv.FormatFloat(items[i].rate, 'g', -1, 64)
		case 1:
			parts[i] = strconv.Itoa(int(items[i].burst))
		default:
			parts[i] = strconv.Itoa(int(items[i].cost))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// run runs sql on a pooled connection within the client's deadline (after
// rl_policies when readPolicies), and answers its one row.  A pooled
// connection the server closed meanwhile (a restart) is replaced once
// within the same deadline, and the idle ones are dropped with it.
func (c *Client) run(ctx context.Context, sql string, args []string, readPolicies bool, a *answer) [][]byte {
	dctx, cancel := context.WithTimeout(ctx, c.deadline)
	defer cancel()
	values := make([][]byte, len(args))
	for i, s := range args {
		values[i] = []byte(s)
	}
	for try := 0; ; try++ {
		conn, reused, busy, err := c.pool.acquire(dctx)
		if busy && ctx.Err() != nil {
			a.ended = ctx.Err()
			return nil
		}
		if busy {
			a.busy = true
			a.reason = reasonTimeout
			a.failure = fmt.Sprintf("no free connection within %d ms (PoolSize %d)", c.deadline.Milliseconds(), c.opts.PoolSize)
			return nil
		}
		if err != nil {
			c.failed(ctx, dctx, err, a)
			return nil
		}
		if readPolicies {
			at12 := c.policies12.Load()
			query := c.queries.policies
			if at12 {
				query = c.queries.policies12
			}
			res := conn.ExecParams(dctx, query, nil, nil, nil, nil).Read()
			err = res.Err
			var pe *pgconn.PgError
			if !at12 && errors.As(err, &pe) && pe.Code == "42703" {
				// a 1.2 database has no lockout columns: read its own
				c.policies12.Store(true)
				res = conn.ExecParams(dctx, c.queries.policies12, nil, nil, nil, nil).Read()
				err = res.Err
			}
			if err == nil {
				a.policies, err = parsePolicies(res.Rows)
			}
		}
		var row [][]byte
		if err == nil {
			res := conn.ExecParams(dctx, sql, values, nil, nil, nil).Read()
			err = res.Err
			if err == nil && len(res.Rows) != 1 {
				err = errors.New("the call answered no row")
			}
			if err == nil {
				row = res.Rows[0]
			}
		}
		// a pooled connection the server closed (57P01 on a restart, or EOF)
		dead := err != nil && reused && conn.IsClosed() && dctx.Err() == nil && !isRefusal(err)
		c.pool.release(conn)
		if err == nil {
			return row
		}
		if dead && try == 0 {
			// the server may be back: try a new connection once
			c.pool.dropIdle()
			a.policies = nil
			continue
		}
		c.failed(ctx, dctx, err, a)
		return nil
	}
}

func isRefusal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && refusal(pe.Code, pe.Message) != nil
}

// failed says why the database did not answer: bad use (the server refused
// the call), a timeout, or an error.
func (c *Client) failed(ctx, dctx context.Context, err error, a *answer) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if r := refusal(pe.Code, pe.Message); r != nil {
			// "element N of the arrays of rl_take_all_detail" says which
			if i := strings.Index(pe.Where, "element "); i >= 0 {
				digits := pe.Where[i+8:]
				end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
				if end < 0 {
					end = len(digits)
				}
				n, _ := strconv.Atoi(digits[:end])
				r.Index = n - 1
			}
			r.cause = pe
			a.refusal = r
			return
		}
		a.reason = reasonError
		a.failure = fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
		return
	}
	if ctx.Err() != nil {
		// the caller gave up: neither a decision nor the database's failure
		a.ended = ctx.Err()
		return
	}
	if dctx.Err() != nil || pgconn.Timeout(err) {
		a.reason = reasonTimeout
		a.failure = fmt.Sprintf("no answer within %d ms", c.deadline.Milliseconds())
		return
	}
	a.reason = reasonError
	a.failure = strings.SplitN(err.Error(), "\n", 2)[0]
	if a.failure == "" {
		a.failure = "the connection failed"
	}
}

// dbDecide makes one decision of call by the database.
func (c *Client) dbDecide(ctx context.Context, k call, items []item, readPolicies bool) answer {
	var a answer
	var sql string
	var args []string
	switch k {
	case callTake:
		it := &items[0]
		sql = c.queries.take
		args = []string{it.limiter, it.key, strconv.FormatFloat(it.rate, 'g', -1, 64),
			strconv.Itoa(int(it.burst)), strconv.Itoa(int(it.cost))}
	case callPolicy:
		sql = c.queries.takePolicy
		args = []string{items[0].limiter, items[0].key, strconv.Itoa(int(items[0].cost))}
	case callAll:
		sql = c.queries.takeAll
		args = []string{textArray(items, false), textArray(items, true),
			numberArray(items, 0), numberArray(items, 1), numberArray(items, 2)}
	case callAllPolicy:
		sql = c.queries.takeAllPolicy
		args = []string{textArray(items, false), textArray(items, true), numberArray(items, 2)}
	}
	row := c.run(ctx, sql, args, readPolicies, &a)
	if row == nil {
		if a.refusal != nil && (a.refusal.Index < 0 || a.refusal.Index >= len(items)) {
			a.refusal.Index = 0
		}
		return a
	}
	var ok bool
	if k == callTake || k == callPolicy {
		a.decision, ok = parseDecision(row)
		a.resets = []float64{a.decision.ResetAfter.Seconds()}
	} else {
		a.decision, a.resets, ok = parseDecisionAll(row, items)
	}
	if !ok {
		a.reason = reasonError
		a.failure = "rl_take answered something that is not a decision"
	}
	return a
}

// dbRefund runs rl_refund.
func (c *Client) dbRefund(ctx context.Context, limiter, key string, cost int) answer {
	var a answer
	row := c.run(ctx, c.queries.refund, []string{limiter, key, strconv.Itoa(cost)}, false, &a)
	if row != nil {
		if len(row) != 1 || row[0] == nil {
			a.reason = reasonError
			a.failure = "rl_refund answered something that is not a boolean"
		}
		a.refunded = string(row[0]) == "t"
	}
	return a
}

// seconds parses a number of seconds from the database: finite, not negative.
func seconds(b []byte) (float64, bool) {
	f, err := strconv.ParseFloat(string(b), 64)
	return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) && f >= 0
}

// duration parses a number of seconds from the database as a duration, to
// the microsecond the server counts in.
func duration(b []byte) (time.Duration, bool) {
	f, ok := seconds(b)
	return usDuration(secondsToUs(f, math.MaxInt64/int64(time.Microsecond))), ok
}

// parseDecision reads rl_take's row (text format).
func parseDecision(row [][]byte) (Decision, bool) {
	var d Decision
	if len(row) != 4 || row[0] == nil || row[1] == nil || row[3] == nil {
		return d, false
	}
	d.Allowed = string(row[0]) == "t"
	n, err := strconv.ParseInt(string(row[1]), 10, 32)
	if err != nil || n < 0 {
		return d, false
	}
	d.Remaining = int(n)
	ok := true
	if row[2] == nil {
		d.RetryAfter = Never
	} else if d.RetryAfter, ok = duration(row[2]); !ok {
		return d, false
	}
	d.ResetAfter, ok = duration(row[3])
	d.Source = SourceDatabase
	return d, ok
}

// parseDecisionAll reads rl_take_all_detail's row: the decision and each
// bucket's reset_after.
func parseDecisionAll(row [][]byte, items []item) (Decision, []float64, bool) {
	if len(row) != 6 || row[4] == nil || row[5] == nil {
		return Decision{}, nil, false
	}
	d, ok := parseDecision(row[:4])
	if !ok {
		return d, nil, false
	}
	d.Binding = -1
	for i := range items {
		if items[i].limiter == string(row[4]) {
			d.Binding = i
			break
		}
	}
	text := string(row[5])
	if d.Binding < 0 || len(text) < 2 || text[0] != '{' || text[len(text)-1] != '}' {
		return d, nil, false
	}
	parts := strings.Split(text[1:len(text)-1], ",")
	if len(parts) != len(items) {
		return d, nil, false
	}
	resets := make([]float64, len(items))
	for i, p := range parts {
		if resets[i], ok = seconds([]byte(p)); !ok {
			return d, nil, false
		}
	}
	return d, resets, true
}

// intervalUs is an interval column in microseconds as the server counts it
// (30-day months, exact numeric): extract(epoch) counts a year as 365.25 days.
func intervalUs(col string) string {
	return strings.ReplaceAll("((((extract(year FROM @c) * 12 + extract(month FROM @c)) * 30"+
		" + extract(day FROM @c)) * 86400 + extract(epoch FROM @c - date_trunc('day', @c)))"+
		" * 1000000)::bigint", "@c", col)
}

// parsePolicies reads rl_policies: 1.3's columns, or 1.2's.
func parsePolicies(rows [][][]byte) (map[string]policy, error) {
	m := make(map[string]policy, len(rows))
	for _, r := range rows {
		if (len(r) != 4 && len(r) != 7) || r[0] == nil || r[1] == nil || r[2] == nil || r[3] == nil {
			return nil, errors.New("rl_policies could not be read")
		}
		rate, err1 := strconv.ParseFloat(string(r[1]), 64)
		burst, err2 := strconv.ParseInt(string(r[2]), 10, 32)
		if err1 != nil || err2 != nil {
			return nil, errors.New("rl_policies could not be read")
		}
		p := policy{rate: rate, burst: int32(burst), shadow: string(r[3]) == "t", lockoutGrowth: 1}
		if len(r) == 7 && r[4] != nil {
			var err3, err4, err5 error
			p.lockoutUs, err3 = strconv.ParseInt(string(r[4]), 10, 64)
			p.lockoutGrowth, err4 = strconv.ParseFloat(string(r[5]), 64)
			if r[6] != nil {
				p.lockoutMaxUs, err5 = strconv.ParseInt(string(r[6]), 10, 64)
			}
			if err3 != nil || err4 != nil || err5 != nil {
				return nil, errors.New("rl_policies could not be read")
			}
		}
		m[string(r[0])] = p
	}
	return m, nil
}
