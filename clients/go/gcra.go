// The GCRA decision arithmetic of include/gcra.h, in integer microseconds.
//
// This is a port, line for line, of the header the server and the C client
// share: the vectors of test/vectors/gcra.json, generated from gcra.h, prove
// that it decides identically (gcra_test.go replays all of them).

package ratelimit

import (
	"math"
	"math/bits"
)

// maxRate is the highest rate, in requests per second, that rl_take accepts.
const maxRate = 1000000.0

// maxRequests is the most requests one decision over several buckets takes.
const maxRequests = 16

type gcraError int

const (
	gcraOK gcraError = iota
	gcraBadRate
	gcraBadBurst
	gcraBadCost
	gcraToleranceTooLarge
	gcraBadLockout // outside 1 s .. 366 days, growth 1 .. 100
)

// The longest lockout, the shortest, and the largest growth a policy may ask
// for.
const (
	maxLockoutUs     = int64(366) * 86400 * 1000000
	minLockoutUs     = int64(1000000)
	maxLockoutGrowth = 100.0
)

func (e gcraError) message() string {
	switch e {
	case gcraOK:
		return "no error"
	case gcraBadRate:
		return "rate must be a finite number of requests per second above 0 and at most 1000000"
	case gcraBadBurst:
		return "burst must be at least 1"
	case gcraBadCost:
		return "cost must not be negative"
	case gcraToleranceTooLarge:
		return "burst divided by rate is too long a tolerance: now + 2 * burst / rate must stay inside the timestamp range"
	case gcraBadLockout:
		return "lockout must be 1 second to 366 days, lockout_growth 1 to 100, and lockout_max from lockout to 366 days"
	}
	return "unknown error"
}

// gcraLimit is a limit as the arithmetic sees it, with the lockout of a
// policy that has one (lockoutUs 0: none).
type gcraLimit struct {
	intervalUs    int64 // T = max(1, round(1e6 / rate))
	toleranceUs   int64 // tau = T * burst
	burst         int32
	lockoutUs     int64   // the first lockout's length; 0: none
	lockoutMaxUs  int64   // the longest one
	lockoutGrowth float64 // each repeat offence's factor
}

// gcraBucket is a stored bucket; present false means none (the same as a
// passed tat and no lockout).  lockUntilUs and lockUs are 0 when the key was
// never locked.
type gcraBucket struct {
	present     bool
	tatUs       int64
	intervalUs  int64 // the T it was last written with
	lockUntilUs int64 // locked while now < lockUntilUs
	lockUs      int64 // the length of the last lockout
}

type gcraDecision struct {
	allowed        bool
	store          bool // write newTatUs, limit T, newLock* back
	normalised     bool
	locked         bool // the answer is a lockout's
	lockStarted    bool // this request started that lockout
	newTatUs       int64
	newLockUntilUs int64 // as stored, or the new lockout's
	newLockUs      int64
	remaining      int32
	retryKnown     bool // false when cost > burst: never allowed
	retryAfterUs   int64
	resetAfterUs   int64
}

// gcraLimitInit turns (rate, burst) into a limit and checks that every
// intermediate of a decision at nowUs fits: now + 2 * tau <= maxTimeUs.
func gcraLimitInit(rate float64, burst int32, nowUs, maxTimeUs int64) (gcraLimit, gcraError) {
	var l gcraLimit
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 || rate > maxRate {
		return l, gcraBadRate
	}
	if burst < 1 {
		return l, gcraBadBurst
	}
	interval := math.Round(1e6 / rate)
	if interval < 1 {
		interval = 1
	}
	if interval >= 4611686018427387904.0 { // 2^62
		return l, gcraToleranceTooLarge
	}
	l.intervalUs = int64(interval)
	l.burst = burst
	l.lockoutGrowth = 1
	tolerance, ok := mulInt64(l.intervalUs, int64(burst))
	if !ok {
		return l, gcraToleranceTooLarge
	}
	horizon, ok := mulInt64(tolerance, 2)
	if !ok {
		return l, gcraToleranceTooLarge
	}
	horizon, ok = addInt64(nowUs, horizon)
	if !ok || horizon > maxTimeUs {
		return l, gcraToleranceTooLarge
	}
	l.toleranceUs = tolerance
	return l, gcraOK
}

// gcraLockoutInit gives l a lockout of lockoutUs, growing by growth up to
// maxUs (0: lockoutUs).  now + 2 * maxUs must stay inside the time range, so
// that a lockout's end and its forgiveness fit.
func gcraLockoutInit(l *gcraLimit, lockoutUs int64, growth float64, maxUs, nowUs, maxTimeUs int64) gcraError {
	if maxUs == 0 {
		maxUs = lockoutUs
	}
	// NaN fails both comparisons of the growth
	if lockoutUs < minLockoutUs || lockoutUs > maxLockoutUs ||
		maxUs < lockoutUs || maxUs > maxLockoutUs ||
		!(growth >= 1 && growth <= maxLockoutGrowth) {
		return gcraBadLockout
	}
	if nowUs > maxTimeUs-2*maxUs {
		return gcraToleranceTooLarge
	}
	l.lockoutUs = lockoutUs
	l.lockoutMaxUs = maxUs
	l.lockoutGrowth = growth
	return gcraOK
}

// gcraLockoutLength is the length of a lockout that starts at nowUs: the
// last one's times the growth (one IEEE double multiplication, then floor),
// between lockout and lockout_max, when the key offends again no longer
// after its last lockout ended than that lockout lasted; else the first
// length.
func gcraLockoutLength(l *gcraLimit, b *gcraBucket, nowUs int64) int64 {
	if !(b.present && b.lockUntilUs <= nowUs && nowUs-b.lockUntilUs < b.lockUs) {
		return l.lockoutUs
	}
	grown := int64(math.Floor(float64(b.lockUs) * l.lockoutGrowth))
	if grown < l.lockoutUs {
		grown = l.lockoutUs
	}
	if grown > l.lockoutMaxUs {
		return l.lockoutMaxUs
	}
	return grown
}

// gcraBucketForgotten tells whether b is the same as an absent bucket at
// nowUs, so that it may be deleted: its tat has passed, and so has the time
// during which a new offence would lengthen its last lockout.
func gcraBucketForgotten(b *gcraBucket, nowUs int64) bool {
	return !b.present || (b.tatUs <= nowUs && b.lockUntilUs+b.lockUs <= nowUs)
}

func mulInt64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return c, true
}

func addInt64(a, b int64) (int64, bool) {
	c := a + b
	if (b > 0 && c < a) || (b < 0 && c > a) {
		return 0, false
	}
	return c, true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && ((a < 0) != (b < 0)) {
		return q - 1
	}
	return q
}

// gcraReport fills remaining, resetAfter and newTat of d from the bucket's
// tat after the decision.
func gcraReport(d *gcraDecision, l *gcraLimit, nowUs, tatAfter int64) {
	remaining := floorDiv(nowUs+l.toleranceUs-tatAfter, l.intervalUs)
	d.newTatUs = tatAfter
	switch {
	case remaining < 0:
		d.remaining = 0
	case remaining > int64(l.burst):
		d.remaining = l.burst
	default:
		d.remaining = int32(remaining)
	}
	if tatAfter > nowUs {
		d.resetAfterUs = tatAfter - nowUs
	} else {
		d.resetAfterUs = 0
	}
}

// gcraReportLocked fills d with the answer of a locked key: nothing left
// until the lock ends, and full again once both the lock and the tat have
// passed.
func gcraReportLocked(d *gcraDecision, nowUs, tatUsed, lockUntil int64) {
	d.locked = true
	d.newTatUs = tatUsed
	d.remaining = 0
	if tatUsed > lockUntil {
		d.resetAfterUs = tatUsed - nowUs
	} else {
		d.resetAfterUs = lockUntil - nowUs
	}
}

// rescaledDebt is min(tau, debt * T / storedT) in 128 bits: debt, T and
// storedT are not negative, and neither product nor quotient need fit.
func rescaledDebt(debt uint64, T, storedT, tau int64) int64 {
	hi, lo := bits.Mul64(debt, uint64(T))
	if hi >= uint64(storedT) {
		return tau // the quotient needs more than 64 bits
	}
	q, _ := bits.Div64(hi, lo, uint64(storedT))
	if q > uint64(tau) {
		return tau
	}
	return int64(q)
}

// gcraDecide decides a request of cost at nowUs against bucket under l, as
// gcra_decide does.  Under a limit with a lockout, a key locked at nowUs is
// denied (a peek allowed) without spending or storing anything, not even the
// normalised debt; a denial of a request the burst can hold starts a
// lockout, stored with the bucket.  Without one, a stored lock is kept and
// ignored.
func gcraDecide(l *gcraLimit, b *gcraBucket, nowUs int64, cost int32) gcraDecision {
	var d gcraDecision
	T := l.intervalUs
	tau := l.toleranceUs
	live := b.present && b.tatUs >= nowUs
	var debt int64
	normalised := false
	if live {
		// tat >= now: the difference is exact as an unsigned number
		stored := uint64(b.tatUs) - uint64(nowUs)
		debt = rescaledDebt(stored, T, b.intervalUs, tau)
		normalised = uint64(debt) != stored || b.intervalUs != T
	}
	tatUsed := nowUs + debt
	if b.present {
		d.newLockUntilUs = b.lockUntilUs
		d.newLockUs = b.lockUs
	}

	if l.lockoutUs > 0 && b.present && nowUs < b.lockUntilUs {
		d.allowed = cost == 0
		d.retryKnown = true
		if cost != 0 {
			d.retryAfterUs = b.lockUntilUs - nowUs
		}
		gcraReportLocked(&d, nowUs, tatUsed, b.lockUntilUs)
		return d
	}

	var tatAfter int64
	switch {
	case cost == 0:
		d.allowed = true
		d.retryKnown = true
		tatAfter = tatUsed
	case cost > l.burst:
		d.allowed = false
		d.retryKnown = false
		tatAfter = tatUsed
	default:
		newTat := tatUsed + int64(cost)*T
		d.allowed = newTat-nowUs <= tau
		d.retryKnown = true
		if !d.allowed {
			d.retryAfterUs = newTat - nowUs - tau
			tatAfter = tatUsed
		} else {
			tatAfter = newTat
		}
	}
	d.normalised = normalised
	d.store = cost > 0 && (d.allowed || normalised)
	if !d.allowed && d.retryKnown && l.lockoutUs > 0 {
		length := gcraLockoutLength(l, b, nowUs)
		d.lockStarted = true
		d.store = true
		d.newLockUntilUs = nowUs + length
		d.newLockUs = length
		d.retryAfterUs = length
		gcraReportLocked(&d, nowUs, tatUsed, d.newLockUntilUs)
		return d
	}
	gcraReport(&d, l, nowUs, tatAfter)
	return d
}

// gcraRequest is one request of a decision over several buckets.
type gcraRequest struct {
	limit  gcraLimit
	bucket gcraBucket
	cost   int32
	shadow bool // decided and stored, but never denies
}

// gcraCombined is the one answer of a decision over several buckets.
type gcraCombined struct {
	allowed      bool
	remaining    int32
	retryKnown   bool
	retryAfterUs int64
	resetAfterUs int64
	binding      int
}

// gcraCombine combines the decisions as gcra_combine does.
func gcraCombine(d []gcraDecision, shadow []bool) gcraCombined {
	c := gcraCombined{allowed: true, retryKnown: true, remaining: d[0].remaining,
		resetAfterUs: d[0].resetAfterUs}
	for i := range d {
		if d[i].remaining < c.remaining {
			c.remaining = d[i].remaining
		}
		if d[i].resetAfterUs > c.resetAfterUs {
			c.resetAfterUs = d[i].resetAfterUs
		}
		if !d[i].allowed && !shadow[i] {
			var binds bool
			switch {
			case c.allowed:
				binds = true
			case !c.retryKnown:
				binds = false
			default:
				binds = !d[i].retryKnown || d[i].retryAfterUs > c.retryAfterUs
			}
			c.allowed = false
			if binds {
				c.binding = i
				c.retryKnown = d[i].retryKnown
				if d[i].retryKnown {
					c.retryAfterUs = d[i].retryAfterUs
				} else {
					c.retryAfterUs = 0
				}
			}
		}
	}
	if c.allowed {
		i := 0
		for d[i].remaining != c.remaining {
			i++
		}
		c.binding = i
	}
	return c
}

// gcraDecideAll decides the requests all or nothing, as gcra_decide_all
// does; decisions receives each request's decision.
func gcraDecideAll(r []gcraRequest, nowUs int64, decisions []gcraDecision) gcraCombined {
	var shadowOf [maxRequests]bool
	shadow := shadowOf[:len(r)]
	allowed := true
	for i := range r {
		decisions[i] = gcraDecide(&r[i].limit, &r[i].bucket, nowUs, r[i].cost)
		shadow[i] = r[i].shadow
		if !decisions[i].allowed && !shadow[i] {
			allowed = false
		}
	}
	if !allowed {
		for i := range r {
			d := &decisions[i]
			if !d.allowed || r[i].cost == 0 {
				continue
			}
			// not spent: back to the bucket as normalised
			d.store = d.normalised
			gcraReport(d, &r[i].limit, nowUs, d.newTatUs-int64(r[i].cost)*r[i].limit.intervalUs)
		}
	}
	return gcraCombine(decisions[:len(r)], shadow)
}
