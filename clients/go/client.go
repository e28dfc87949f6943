// Package ratelimit is the Go client of the ratelimit PostgreSQL extension:
// rl_take and its friends on pgx's pgconn, with the promises of the C
// client (include/ratelimit_client.h): a local pre-check that keeps a flood
// off the database, a deadline per decision that holds for a stalled
// server, a per-process fallback at the same limit during an outage,
// backoff, warnings and counters.
//
// Every decision the client makes itself uses gcra.go, a port of
// include/gcra.h proved identical by the shared test vectors.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgMaxTimeUs is the last microsecond a timestamptz holds, since 2000-01-01.
const pgMaxTimeUs = 9223371331200000000 - 1

// pgEpoch is PostgreSQL's epoch, 2000-01-01 UTC.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// maxWarnedLimiters limiters are remembered as having warned.
const maxWarnedLimiters = 1024

// Source says who made a decision.
type Source int

const (
	SourceDatabase Source = iota // rl_take answered
	SourceLocal                  // the pre-check refused, no round trip
	SourceFallback               // the in-memory limiter, during an outage
)

func (s Source) String() string {
	switch s {
	case SourceDatabase:
		return "database"
	case SourceLocal:
		return "local"
	case SourceFallback:
		return "fallback"
	}
	return "unknown"
}

// Never is the RetryAfter of a request no wait lets through (a cost above
// the burst: rl_take's NULL retry_after).
const Never time.Duration = math.MaxInt64

// Decision is the answer to a request, as rl_take's rl_decision (and, for
// the multi-limit calls, rl_decision_all) holds it, to the microsecond.
type Decision struct {
	Allowed    bool
	Remaining  int           // requests of cost 1 left in the burst (the least, for TakeAll)
	RetryAfter time.Duration // 0 when allowed; Never when no wait lets it through
	ResetAfter time.Duration // until the bucket is full again (the largest, for TakeAll)
	Source     Source
	Limiter    string // the limiter the answer is about: for TakeAll, rl_take_all's binding limiter
	Binding    int    // TakeAll: the index of the binding request; 0 otherwise
}

// Limit is rl_take's rate and burst: Burst requests at once, and Rate more
// per second after them.  PerSecond, PerMinute, PerHour and Every make one.
type Limit struct {
	Rate  float64 // requests per second: 10.0/900 is 10 per 15 minutes
	Burst int
}

// PerSecond is n requests per second, n of them at once.
func PerSecond(n int) Limit { return Every(time.Second, n) }

// PerMinute is n requests per minute, n of them at once.
func PerMinute(n int) Limit { return Every(time.Minute, n) }

// PerHour is n requests per hour, n of them at once.
func PerHour(n int) Limit { return Every(time.Hour, n) }

// Every is n requests per period, n of them at once; a period that is not
// positive is a limit every call refuses (ErrBadArgument).
func Every(period time.Duration, n int) Limit {
	rate := math.NaN()
	if period > 0 {
		rate = float64(n) / period.Seconds()
	}
	return Limit{Rate: rate, Burst: n}
}

// WithBurst is l with another burst, at the same rate.
func (l Limit) WithBurst(burst int) Limit {
	l.Burst = burst
	return l
}

// Request is one request of a multi-limit call.
type Request struct {
	Limiter string
	Key     string
	Limit   Limit // TakeAll only: TakeAllPolicy reads the limiter's policy
	Cost    int   // 0 peeks
}

// Options of a client; the zero value of a field means its default.
type Options struct {
	// PoolSize: connections at most; a decision waits (within its
	// deadline) for a free one: 4.
	PoolSize int
	// Schema of rl_take, quoted as an identifier; "" uses search_path.
	Schema string
	// Deadline of each database decision, waiting for a pooled connection
	// and connecting included: 250 ms.
	Deadline time.Duration
	// Backoff: after a failure, at most one database attempt per interval:
	// 1 s.
	Backoff time.Duration
	// MaxKeys: keys held in memory at most: 100000.
	MaxKeys int
	// PolicyRefresh: how old the copy of rl_policies may get: 10 s.
	PolicyRefresh time.Duration
	// WarningInterval: at most one warning per limiter per interval: 1 min.
	WarningInterval time.Duration
	// Logger receives each warning at level Warn, with the attribute
	// "limiter" (absent on the summary line), from the calling goroutine,
	// never under the client's lock.  nil: slog.Default().
	Logger *slog.Logger
	// Warn, when set, receives each warning instead of Logger; limiter is
	// "" for the summary line.
	//
	// Deprecated: use Logger.
	Warn func(limiter, message string)
}

// Stats counts decisions by source and fallbacks by reason since the client
// was made.
type Stats struct {
	Database        uint64 // decisions by source
	Local           uint64
	Fallback        uint64
	FallbackTimeout uint64 // fallbacks by reason
	FallbackError   uint64
	NoRoom          uint64 // fallbacks refused: no bucket for the key, every one in memory live
	NoPolicy        uint64 // fallbacks refused: the limiter's policy was never read
	PolicyReads     uint64 // times rl_policies was read
	Evictions       uint64 // keys forgotten to stay within MaxKeys
	Keys            uint64 // keys in memory now
}

type reason int

const (
	reasonTimeout reason = iota
	reasonError
)

func (r reason) String() string {
	if r == reasonTimeout {
		return "timeout"
	}
	return "error"
}

type policy struct {
	rate          float64
	burst         int32
	shadow        bool
	lockoutUs     int64 // 0: none (or a 1.2 database)
	lockoutGrowth float64
	lockoutMaxUs  int64 // 0: as lockoutUs
}

// Client decides rate limits through the database, and in memory when it
// must.  It is safe for concurrent use by goroutines; make one per process.
type Client struct {
	pool       *connPool
	policies12 atomic.Bool // the database answered 42703: at 1.2, no lockout columns
	queries    queries
	opts       Options
	deadline   time.Duration
	backoff    time.Duration
	seeds      [2]maphash.Seed
	start      time.Time // buckets run on the monotonic clock from here
	startUs    int64     // start, in microseconds since pgEpoch

	// mu guards everything below; it is never held during I/O
	mu            sync.Mutex
	keys          *table
	warned        *table
	summaryDueUs  int64
	retryDbAtUs   int64 // 0: healthy; else no query before then
	failureReason reason
	failure       string
	stats         Stats
	policies      map[string]policy
	policiesDueUs int64
	attempts      uint64 // calls that went to the database (for the tests)
}

// New makes a client on connString (a libpq-style connection string or
// URI, as pgconn.ParseConfig reads it: "host=/var/run/postgresql dbname=app"
// or "postgres://app@db/app"; "" uses PGHOST and the other PG* variables).
// It never connects: the first decision does, so an application starts even
// while the database is down.  Give host as an address or a socket
// directory: a host name is resolved within the deadline, but by the
// system's resolver.  Its statements are unnamed (PgBouncer's transaction
// pooling works), and its sessions show application_name ratelimit_client
// unless connString sets one.
func New(connString string, opts *Options) (*Client, error) {
	config, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return NewWithConfig(config, opts)
}

// Connect is New; it never used ctx.
//
// Deprecated: use New.
func Connect(_ context.Context, connString string, opts *Options) (*Client, error) {
	return New(connString, opts)
}

// NewWithConfig is New on a config made by pgconn.ParseConfig, which the
// application may have changed: TLSConfig, DialFunc, LookupFunc,
// AfterConnect and the other fields of pgconn.Config.  The client keeps a
// copy; client_encoding is always UTF8.
func NewWithConfig(config *pgconn.Config, opts *Options) (*Client, error) {
	if config == nil {
		return nil, errors.New("ratelimit: config must not be nil (make it with pgconn.ParseConfig)")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{{&o.Deadline, 250 * time.Millisecond}, {&o.Backoff, time.Second},
		{&o.PolicyRefresh, 10 * time.Second}, {&o.WarningInterval, time.Minute}}
	for _, x := range defaults {
		if *x.d == 0 {
			*x.d = x.def
		}
	}
	if o.PoolSize == 0 {
		o.PoolSize = 4
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = 100000
	}
	if o.Warn == nil {
		logger := o.Logger
		if logger == nil {
			logger = slog.Default()
		}
		o.Warn = func(limiter, message string) {
			if limiter == "" {
				logger.Warn("ratelimit: " + message)
			} else {
				logger.Warn("ratelimit: "+message, slog.String("limiter", limiter))
			}
		}
	}
	if o.Deadline < time.Millisecond || o.Backoff < time.Millisecond || o.PoolSize < 1 ||
		o.MaxKeys < 1 || o.MaxKeys > 1<<30 || o.PolicyRefresh < time.Millisecond ||
		o.WarningInterval < time.Millisecond {
		return nil, errors.New("ratelimit: an option is out of range (durations of 1 ms at least, PoolSize 1 or more, MaxKeys 1 to 2^30)")
	}
	config = config.Copy()
	if _, ok := config.RuntimeParams["application_name"]; !ok {
		config.RuntimeParams["application_name"] = "ratelimit_client"
	}
	// limiter and key are UTF-8 text
	config.RuntimeParams["client_encoding"] = "UTF8"
	c := &Client{
		pool:     newConnPool(config, o.PoolSize),
		queries:  buildQueries(o.Schema),
		opts:     o,
		deadline: o.Deadline,
		backoff:  o.Backoff,
		seeds:    [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		start:    time.Now(),
		keys:     newTable(o.MaxKeys),
		warned:   newTable(maxWarnedLimiters),
	}
	c.startUs = c.start.Sub(pgEpoch).Microseconds()
	return c, nil
}

// Close closes the connections without waiting for the network (a
// decision still running closes its own when it ends).  The client's last
// use.
func (c *Client) Close() {
	c.pool.close()
}

// Stats answers the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Evictions = c.keys.evictions
	s.Keys = uint64(len(c.keys.heap))
	return s
}

// nowUs is the monotonic clock, in microseconds on PostgreSQL's epoch.
func (c *Client) nowUs() int64 {
	return c.startUs + time.Since(c.start).Microseconds()
}

// wallUs is the wall clock on PostgreSQL's epoch, for the limit checks the
// server makes at its own now.
func wallUs() int64 {
	return time.Since(pgEpoch).Microseconds()
}

func (c *Client) identity(limiter, key string) [2]uint64 {
	var id [2]uint64
	for i := range id {
		var h maphash.Hash
		h.SetSeed(c.seeds[i])
		h.WriteString(limiter)
		h.WriteByte(0)
		h.WriteString(key)
		id[i] = h.Sum64()
	}
	return id
}

// ---- argument checks, in rl_take's order and with its messages ----

func checkName(what, s string) *Error {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return badArgument("22021", what+" must be valid UTF-8")
	}
	return nil
}

func checkNames(limiter, key string) *Error {
	if e := checkName("limiter", limiter); e != nil {
		return e
	}
	if e := checkName("key", key); e != nil {
		return e
	}
	if limiter == "" {
		return badArgument("22023", "limiter must not be empty")
	}
	if key == "" {
		return badArgument("22023", "key must not be empty")
	}
	return nil
}

func checkCost(cost int) *Error {
	if cost < 0 {
		return badArgument("22023", gcraBadCost.message())
	}
	if cost > math.MaxInt32 {
		return badArgument("22003", "cost is out of range for type integer")
	}
	return nil
}

// checkLimit turns (rate, burst) into a limit as rl_take checks it.
func checkLimit(rate float64, burst int) (gcraLimit, *Error) {
	if burst > math.MaxInt32 {
		return gcraLimit{}, badArgument("22003", "burst is out of range for type integer")
	}
	if burst < math.MinInt32 {
		burst = math.MinInt32
	}
	l, e := gcraLimitInit(rate, int32(burst), wallUs(), pgMaxTimeUs)
	if e != gcraOK {
		return l, badArgument("22023", e.message())
	}
	return l, nil
}

// precheckLimit is the limit of the pre-check: the same rate, twice the burst.
func precheckLimit(rate float64, burst int32) (gcraLimit, bool) {
	b := int64(burst) * 2
	if b > math.MaxInt32 {
		b = math.MaxInt32
	}
	l, e := gcraLimitInit(rate, int32(b), wallUs(), pgMaxTimeUs)
	return l, e == gcraOK
}

// ---- the calls ----

// item is one request as the client decides it.
type item struct {
	limiter string
	key     string
	rate    float64
	burst   int32
	cost    int32
	id      [2]uint64
	known   bool // rate and burst known: explicit, or read from rl_policies
	shadow  bool
	limit   gcraLimit
}

type call int

const (
	callTake      call = iota // rl_take(limiter, key, rate, burst, cost)
	callPolicy                // rl_take(limiter, key, cost)
	callAll                   // rl_take_all(limiters, keys, rates, bursts, costs)
	callAllPolicy             // rl_take_all(limiters, keys, costs)
)

// Take takes cost requests from the bucket of (limiter, key) at limit, as
// rl_take(limiter, key, rate, burst, cost) does.  The error is for bad use
// (an *Error) and for ctx ending first (wrapping ctx.Err()); an outage of
// the database is a decision.
func (c *Client) Take(ctx context.Context, limiter, key string, limit Limit, cost int) (Decision, error) {
	if e := checkNames(limiter, key); e != nil {
		return refused(e, limiter, 0)
	}
	rate, burst := limit.Rate, limit.Burst
	l, e := checkLimit(rate, burst)
	if e == nil {
		e = checkCost(cost)
	}
	if e != nil {
		return refused(e, limiter, 0)
	}
	it := item{limiter: limiter, key: key, rate: rate, burst: int32(burst), cost: int32(cost),
		id: c.identity(limiter, key), known: true, limit: l}
	return c.decide(ctx, callTake, []item{it})
}

// TakePolicy takes cost requests from the bucket of (limiter, key) by the
// limiter's policy in rl_policies, as rl_take(limiter, key, cost) does.  A
// limiter the database has no policy for is an error (ErrUnknownLimiter).
func (c *Client) TakePolicy(ctx context.Context, limiter, key string, cost int) (Decision, error) {
	e := checkNames(limiter, key)
	if e == nil {
		e = checkCost(cost)
	}
	if e != nil {
		return refused(e, limiter, 0)
	}
	it := item{limiter: limiter, key: key, cost: int32(cost), id: c.identity(limiter, key)}
	return c.decide(ctx, callPolicy, []item{it})
}

// TakeAll decides 1 to 16 requests, each against its own bucket, all or
// nothing, as rl_take_all(limiters, keys, rates, bursts, costs) does.
func (c *Client) TakeAll(ctx context.Context, requests []Request) (Decision, error) {
	items, d, err := c.checkRequests(requests, false)
	if err != nil {
		return d, err
	}
	return c.decide(ctx, callAll, items)
}

// TakeAllPolicy is TakeAll by the limiters' policies (Rate and Burst are not
// read), as rl_take_all(limiters, keys, costs) does.
func (c *Client) TakeAllPolicy(ctx context.Context, requests []Request) (Decision, error) {
	items, d, err := c.checkRequests(requests, true)
	if err != nil {
		return d, err
	}
	return c.decide(ctx, callAllPolicy, items)
}

// refused is the answer to bad use: a denial and the error.
func refused(e *Error, limiter string, index int) (Decision, error) {
	e.Limiter = limiter
	e.Index = index
	return Decision{Limiter: limiter, Binding: index}, e
}

func (c *Client) checkRequests(requests []Request, byPolicy bool) ([]item, Decision, error) {
	if len(requests) < 1 || len(requests) > maxRequests {
		d, err := refused(badArgument("22023", "requests must have 1 to 16 elements"), "", 0)
		return nil, d, err
	}
	items := make([]item, len(requests))
	seen := make(map[[2]uint64]bool, len(requests))
	for i, q := range requests {
		it := &items[i]
		e := checkNames(q.Limiter, q.Key)
		if e == nil && !byPolicy {
			it.limit, e = checkLimit(q.Limit.Rate, q.Limit.Burst)
			it.known, it.rate, it.burst = true, q.Limit.Rate, int32(q.Limit.Burst)
		}
		if e == nil {
			e = checkCost(q.Cost)
		}
		if e != nil {
			d, err := refused(e, q.Limiter, i)
			return nil, d, err
		}
		it.limiter, it.key, it.cost = q.Limiter, q.Key, int32(q.Cost)
		it.id = c.identity(q.Limiter, q.Key)
		if seen[it.id] {
			d, err := refused(badArgument("22023", "limiters and keys must not name the same pair twice"), q.Limiter, i)
			return nil, d, err
		}
		seen[it.id] = true
	}
	return items, Decision{}, nil
}

// learnLock is the lock of bucket as the database's answer shows it (the
// answer has no lock state).  A denial of the binding request, enforced, of
// cost <= burst, by a policy with a lockout is a lock of RetryAfter from now:
// the lock the bucket already held keeps its length, a new one takes
// RetryAfter as its length (shorter than the database's for a lock another
// process started, so a later lockout in memory is never longer).  An
// allowed answer ends a lock held in memory (rl_reset).
func learnLock(b *gcraBucket, it *item, d *Decision, binding bool, now int64) (int64, int64) {
	held := b.present && now < b.lockUntilUs
	switch {
	case d.Allowed && held:
		return 0, 0
	case !d.Allowed && binding && it.limit.lockoutUs > 0 && !it.shadow &&
		it.cost <= it.burst && d.RetryAfter != Never:
		length := min(d.RetryAfter.Microseconds(), it.limit.lockoutMaxUs)
		if held {
			return now + length, b.lockUs
		}
		return now + length, length
	}
	return b.lockUntilUs, b.lockUs
}

// memoryRequests appends to reqs the call's requests of a known limit
// against their in-memory buckets (the database's last answers), each of its
// own cost or a peek, and to which the item of each (c.mu held).
func (c *Client) memoryRequests(items []item, peek bool, reqs []gcraRequest, which []int) ([]gcraRequest, []int) {
	for i := range items {
		it := &items[i]
		if !it.known {
			continue
		}
		var b gcraBucket
		if e := c.keys.entries[it.id]; e != nil {
			b = e.memory
		}
		r := gcraRequest{limit: it.limit, bucket: b, cost: it.cost, shadow: it.shadow}
		if peek {
			r.cost = 0
		}
		reqs = append(reqs, r)
		which = append(which, i)
	}
	return reqs, which
}

// locked refuses a call of which a key is locked by the database's last
// answer, carried forward in time, with the answer the database would give
// (source local), until the lock ends.  c.mu held.
func (c *Client) locked(items []item, now int64) (Decision, bool) {
	var reqsOf [maxRequests]gcraRequest
	var decisions [maxRequests]gcraDecision
	var whichOf [maxRequests]int
	reqs, which := c.memoryRequests(items, false, reqsOf[:0], whichOf[:0])
	if len(reqs) == 0 {
		return Decision{}, false
	}
	d := decisions[:len(reqs)]
	take := gcraDecideAll(reqs, now, d)
	locked := false
	for i := range d {
		locked = locked || (d[i].locked && !d[i].lockStarted && !reqs[i].shadow)
	}
	if !locked || take.allowed {
		return Decision{}, false
	}
	take.binding = which[take.binding]
	return fromCombined(&take, items, SourceLocal), true
}

// applyPolicies sets the items' limits from the last read of rl_policies
// (c.mu held).  A limiter not in it is not known: the database decides on
// it without a pre-check.
func (c *Client) applyPolicies(items []item) {
	wall := wallUs()
	for i := range items {
		it := &items[i]
		p, ok := c.policies[it.limiter]
		it.known = false
		if ok {
			l, e := gcraLimitInit(p.rate, p.burst, wall, pgMaxTimeUs)
			if e == gcraOK && p.lockoutUs > 0 {
				e = gcraLockoutInit(&l, p.lockoutUs, p.lockoutGrowth, p.lockoutMaxUs, wall, pgMaxTimeUs)
			}
			if e == gcraOK {
				it.known, it.limit, it.rate, it.burst, it.shadow = true, l, p.rate, p.burst, p.shadow
			}
		}
	}
}

func fromCombined(cb *gcraCombined, items []item, source Source) Decision {
	d := Decision{Allowed: cb.allowed, Remaining: int(cb.remaining),
		RetryAfter: usDuration(cb.retryAfterUs), ResetAfter: usDuration(cb.resetAfterUs),
		Source: source, Binding: cb.binding}
	if !cb.retryKnown {
		d.RetryAfter = Never
	}
	if cb.binding < len(items) {
		d.Limiter = items[cb.binding].limiter
	}
	return d
}

// decide makes one decision of call over items, whose arguments are
// checked: the pre-check, the database within the deadline, or the
// in-memory limiter, each deciding all or nothing.  A call by policy reads
// rl_policies first when the last read is older than PolicyRefresh (on the
// same connection, within the same deadline); during an outage, the last
// read decides.
func (c *Client) decide(ctx context.Context, k call, items []item) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, ended(err)
	}
	byPolicy := k == callPolicy || k == callAllPolicy
	readPolicies := false

	c.mu.Lock()
	now := c.nowUs()
	if byPolicy {
		c.applyPolicies(items)
		// this call reads them; the others meanwhile use the last read
		if now >= c.policiesDueUs {
			readPolicies = true
			c.policiesDueUs = now + c.opts.PolicyRefresh.Microseconds()
		}
	}
	if c.retryDbAtUs != 0 && now < c.retryDbAtUs {
		// in the backoff: the failure that started it is the reason
		if readPolicies {
			c.policiesDueUs = 0
		}
		return c.fallback(items, now, c.failureReason, c.failure)
	}
	// a due read goes to the database: the pre-check waits for its policy
	if !readPolicies {
		if d, refused := c.precheck(items, now); refused {
			c.stats.Local++
			c.mu.Unlock()
			return d, nil
		}
	}
	if c.retryDbAtUs != 0 {
		// this request is the one probe of the interval
		c.retryDbAtUs = now + c.backoff.Microseconds()
	}
	c.attempts++
	c.mu.Unlock()

	a := c.dbDecide(ctx, k, items, readPolicies)

	c.mu.Lock()
	now = c.nowUs()
	if a.policies != nil {
		c.policies = a.policies
		c.stats.PolicyReads++
		c.applyPolicies(items)
	} else if readPolicies {
		c.policiesDueUs = 0
	}
	switch {
	case a.ended != nil:
		// the caller gave up: no decision, and no news of the database
		if c.retryDbAtUs != 0 {
			c.retryDbAtUs = now
		}
		c.mu.Unlock()
		return Decision{}, ended(a.ended)
	case a.refusal != nil:
		// the database answered: bad use, not an outage
		c.retryDbAtUs = 0
		c.mu.Unlock()
		name := ""
		if a.refusal.Index < len(items) {
			name = items[a.refusal.Index].limiter
		}
		return refused(a.refusal, name, a.refusal.Index)
	case a.failure == "":
		c.retryDbAtUs = 0
		c.stats.Database++
		// each bucket's shared fill level, for an outage that starts now
		for i := range items {
			it := &items[i]
			if !it.known {
				// a policy made since the last read: read them again
				c.policiesDueUs = 0
				continue
			}
			// the database has decided: a live bucket may make room
			if e := c.keys.get(it.id, now, true); e != nil {
				lockUntil, lockUs := learnLock(&e.memory, it, &a.decision, i == a.decision.Binding, now)
				c.keys.set(e, &e.memory, now+secondsToUs(a.resets[i], it.limit.toleranceUs), it.limit.intervalUs)
				e.memory.lockUntilUs, e.memory.lockUs = lockUntil, lockUs
				c.keys.fix(e)
			}
		}
		c.mu.Unlock()
		a.decision.Limiter = items[a.decision.Binding].limiter
		return a.decision, nil
	}
	// a full pool is not a failure of the database: no backoff
	if !a.busy {
		c.retryDbAtUs = now + c.backoff.Microseconds()
		c.failureReason = a.reason
		c.failure = a.failure
	}
	return c.fallback(items, now, a.reason, a.failure)
}

// ended is the error of a call whose context ended first.
func ended(err error) error {
	return fmt.Errorf("ratelimit: %w", err)
}

// usDuration is a duration of us microseconds, Never past the largest.
func usDuration(us int64) time.Duration {
	if us >= math.MaxInt64/int64(time.Microsecond) {
		return Never
	}
	return time.Duration(us) * time.Microsecond
}

// secondsToUs converts seconds from the database to microseconds, at most maxUs.
func secondsToUs(seconds float64, maxUs int64) int64 {
	if seconds*1e6 >= float64(maxUs) {
		return maxUs
	}
	return int64(math.Round(seconds * 1e6))
}

// precheck decides the call over the buckets of twice the burst, all or
// nothing: true when it refuses, with the database's last answers for the
// keys carried forward in time, and the later of the times at which the
// database and the pre-check would let the call through.  A request of cost
// > burst, a shadow one (it never denies) and one of an unknown limit are
// not pre-checked; nor is a key without a bucket and without room.  c.mu
// held.
func (c *Client) precheck(items []item, now int64) (Decision, bool) {
	if d, locked := c.locked(items, now); locked {
		return d, true
	}
	var reqsOf [maxRequests]gcraRequest
	var entriesOf [maxRequests]*entry
	var whichOf [maxRequests]int
	var decisions [maxRequests]gcraDecision
	reqs, entries, which := reqsOf[:0], entriesOf[:0], whichOf[:0]
	for i := range items {
		it := &items[i]
		if !it.known || it.shadow || it.cost > it.burst {
			continue
		}
		l, ok := precheckLimit(it.rate, it.burst)
		if !ok {
			continue
		}
		e := c.keys.get(it.id, now, false)
		if e == nil {
			continue
		}
		c.keys.pin(e, true)
		entries = append(entries, e)
		reqs = append(reqs, gcraRequest{limit: l, bucket: e.precheck, cost: it.cost})
		which = append(which, i)
	}
	if len(reqs) == 0 {
		return Decision{}, false
	}
	d := decisions[:len(reqs)]
	pre := gcraDecideAll(reqs, now, d)
	for i, e := range entries {
		if d[i].store {
			c.keys.set(e, &e.precheck, d[i].newTatUs, reqs[i].limit.intervalUs)
		}
		c.keys.pin(e, false)
	}
	if pre.allowed {
		return Decision{}, false
	}

	// the database's last answers, neither stored
	var knownOf [maxRequests]int
	reqs, known := c.memoryRequests(items, true, reqs[:0], knownOf[:0])
	d = decisions[:len(reqs)]
	peek := gcraDecideAll(reqs, now, d)
	for i, item := range known {
		reqs[i].cost = items[item].cost
	}
	take := gcraDecideAll(reqs, now, d)
	out := fromCombined(&peek, items, SourceLocal)
	out.Allowed = false
	out.Binding = which[pre.binding]
	out.Limiter = items[out.Binding].limiter
	switch {
	case take.allowed || (take.retryKnown && take.retryAfterUs < pre.retryAfterUs):
		out.RetryAfter = usDuration(pre.retryAfterUs)
	case take.retryKnown:
		out.RetryAfter = usDuration(take.retryAfterUs)
	default:
		out.RetryAfter = Never
	}
	return out, true
}

// fallback decides in memory during an outage, all or nothing, by the last
// known limits; it counts the decision and warns when due.  A call with a
// limiter whose policy was never read, or a key without a bucket and
// without room, is refused: never allowed for want of a limit or of
// memory.  No live bucket is forgotten to make room: each key so forgotten
// would start again with a full burst.  Called with c.mu held; releases it.
func (c *Client) fallback(items []item, now int64, r reason, detail string) (Decision, error) {
	var out Decision
	defer c.fallbackDone(items, now, r, detail)
	for i := range items {
		if !items[i].known {
			// refused until the database answers again
			var wait int64
			if c.retryDbAtUs-now > 0 {
				wait = c.retryDbAtUs - now
			}
			c.stats.NoPolicy++
			return Decision{Remaining: 0, RetryAfter: usDuration(wait), ResetAfter: usDuration(wait),
				Source: SourceFallback, Binding: i, Limiter: items[i].limiter}, nil
		}
	}
	var reqsOf [maxRequests]gcraRequest
	var entriesOf [maxRequests]*entry
	var decisions [maxRequests]gcraDecision
	reqs, entries := reqsOf[:0], entriesOf[:0]
	for i := range items {
		e := c.keys.get(items[i].id, now, false)
		if e == nil {
			break
		}
		c.keys.pin(e, true)
		entries = append(entries, e)
		reqs = append(reqs, gcraRequest{limit: items[i].limit, bucket: e.memory,
			cost: items[i].cost, shadow: items[i].shadow})
	}
	if len(entries) == len(items) {
		d := decisions[:len(items)]
		cb := gcraDecideAll(reqs, now, d)
		for i, e := range entries {
			if d[i].store {
				c.keys.set(e, &e.memory, d[i].newTatUs, reqs[i].limit.intervalUs)
				e.memory.lockUntilUs, e.memory.lockUs = d[i].newLockUntilUs, d[i].newLockUs
				c.keys.fix(e)
			}
		}
		out = fromCombined(&cb, items, SourceFallback)
	}
	for _, e := range entries {
		c.keys.pin(e, false)
	}
	if got := len(entries); got < len(items) {
		roomAfter := usDuration(c.keys.heap[0].fullAtUs - now)
		out = Decision{RetryAfter: roomAfter, ResetAfter: roomAfter, Source: SourceFallback,
			Binding: got, Limiter: items[got].limiter}
		// cost > burst is never allowed, with a bucket or without
		if items[got].cost > items[got].burst {
			out.RetryAfter = Never
		}
		c.stats.NoRoom++
	}
	return out, nil
}

// fallbackDone counts a decision in memory and warns for each limiter
// whose warning is due, outside the lock.  c.mu held; releases it.
func (c *Client) fallbackDone(items []item, now int64, r reason, detail string) {
	type warning struct{ limiter, message string }
	var warnings []warning
	c.stats.Fallback++
	if r == reasonTimeout {
		c.stats.FallbackTimeout++
	} else {
		c.stats.FallbackError++
	}
	for i := range items {
		name := items[i].limiter
		twice := false
		for j := 0; j < i; j++ {
			twice = twice || items[j].limiter == name
		}
		if twice {
			continue // a limiter named twice in one call warns once
		}
		switch c.warningDue(name, now) {
		case warnLimiter:
			warnings = append(warnings, warning{name, fmt.Sprintf(
				"limiter %q is decided in memory at the same limit: the database failed (%s: %s); it is tried again at most every %d ms",
				name, r, detail, c.backoff.Milliseconds())})
		case warnSummary:
			warnings = append(warnings, warning{"", fmt.Sprintf(
				"more than %d limiters are decided in memory at the same limit: the database failed (%s: %s); it is tried again at most every %d ms; only %d are named, each at most once per %d ms, and this line comes at most once per %d ms",
				maxWarnedLimiters, r, detail, c.backoff.Milliseconds(), maxWarnedLimiters,
				c.opts.WarningInterval.Milliseconds(), c.opts.WarningInterval.Milliseconds())})
		}
	}
	c.mu.Unlock()
	for _, w := range warnings {
		c.opts.Warn(w.limiter, w.message)
	}
}

type warningKind int

const (
	warnNone warningKind = iota
	warnLimiter
	warnSummary
)

// warningDue says which warning a fallback of limiter gives now.  A limiter
// that warned is remembered, quiet until its interval has passed, in a
// table of maxWarnedLimiters; one whose interval has passed makes room, as a
// full bucket does.  When the table is full of limiters that warned within
// their interval, the others share one summary line per interval, so no
// limiter is named twice within one, whatever their number.  c.mu held.
func (c *Client) warningDue(limiter string, now int64) warningKind {
	e := c.warned.get(c.identity(limiter, ""), now, false)
	if e == nil {
		if now < c.summaryDueUs {
			return warnNone
		}
		c.summaryDueUs = now + c.opts.WarningInterval.Microseconds()
		return warnSummary
	}
	if e.fullAtUs > now {
		return warnNone
	}
	e.fullAtUs = now + c.opts.WarningInterval.Microseconds()
	c.warned.heapFix(e)
	return warnLimiter
}

// Refund gives cost cells back to the bucket of (limiter, key), as
// rl_refund(limiter, key, cost) does (true when it changed a live bucket;
// the role needs EXECUTE on rl_refund).  The client's own buckets of the key
// get them back too, so that a refunded request does not count against
// the pre-check.  During an outage only the in-memory bucket is refunded,
// and it answers whether that one changed.
func (c *Client) Refund(ctx context.Context, limiter, key string, cost int) (bool, error) {
	e := checkNames(limiter, key)
	if e == nil {
		e = checkCost(cost)
	}
	if e != nil {
		e.Limiter = limiter
		return false, e
	}
	if err := ctx.Err(); err != nil {
		return false, ended(err)
	}
	id := c.identity(limiter, key)
	c.mu.Lock()
	now := c.nowUs()
	if c.retryDbAtUs != 0 && now < c.retryDbAtUs {
		changed := c.refundLocally(id, now, int64(cost))
		c.mu.Unlock()
		return changed, nil
	}
	if c.retryDbAtUs != 0 {
		c.retryDbAtUs = now + c.backoff.Microseconds()
	}
	c.mu.Unlock()

	a := c.dbRefund(ctx, limiter, key, cost)

	c.mu.Lock()
	defer c.mu.Unlock()
	now = c.nowUs()
	switch {
	case a.ended != nil:
		if c.retryDbAtUs != 0 {
			c.retryDbAtUs = now
		}
		return false, ended(a.ended)
	case a.refusal != nil:
		c.retryDbAtUs = 0
		a.refusal.Limiter = limiter
		return false, a.refusal
	case a.failure == "":
		c.retryDbAtUs = 0
		c.refundLocally(id, now, int64(cost))
		return a.refunded, nil
	}
	if !a.busy {
		c.retryDbAtUs = now + c.backoff.Microseconds()
		c.failureReason = a.reason
		c.failure = a.failure
	}
	return c.refundLocally(id, now, int64(cost)), nil
}

// refundLocally gives cost cells back to the key's live buckets in memory,
// at the T each was stored with: tat := max(now, tat - cost * T).  True
// when the in-memory limiter's bucket changed.  c.mu held.
func (c *Client) refundLocally(id [2]uint64, now, cost int64) bool {
	e := c.keys.entries[id]
	if e == nil || cost == 0 {
		return false
	}
	changed := false
	for _, b := range []*gcraBucket{&e.memory, &e.precheck} {
		if !b.present || b.tatUs <= now {
			continue
		}
		tat := now
		if cost < (b.tatUs-now)/b.intervalUs+1 {
			tat = b.tatUs - cost*b.intervalUs
			if tat < now {
				tat = now
			}
		}
		b.tatUs = tat
		changed = changed || b == &e.memory
	}
	c.keys.fix(e)
	return changed
}
