// Limiters as values (the Taker interface), the HTTP fields of a decision
// (the values SQL's rl_headers answers, src/http.c), and a net/http
// middleware that answers 429.

package ratelimit

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Taker decides one request for a key.  The error is only for bad use (an
// *Error a retry cannot fix); an outage is a decision, never an error.
type Taker interface {
	Take(ctx context.Context, key string) (Decision, error)
}

// Limiter is one limiter of a client: explicit (Client.Limiter) or by
// policy (Client.Policy).  It is a Taker.
type Limiter struct {
	c      *Client
	name   string
	rate   float64
	burst  int
	policy bool
}

// Limiter is the limiter name at rate per second with burst (rl_take's
// explicit form: for a limiter without a row in rl_policies).
func (c *Client) Limiter(name string, rate float64, burst int) *Limiter {
	return &Limiter{c: c, name: name, rate: rate, burst: burst}
}

// Policy is the limiter name decided by its policy in rl_policies.
func (c *Client) Policy(name string) *Limiter {
	return &Limiter{c: c, name: name, policy: true}
}

// Name is the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Take takes one request for key.
func (l *Limiter) Take(ctx context.Context, key string) (Decision, error) {
	return l.TakeN(ctx, key, 1)
}

// TakeN takes cost requests for key (0 peeks).
func (l *Limiter) TakeN(ctx context.Context, key string, cost int) (Decision, error) {
	if l.policy {
		return l.c.TakePolicy(ctx, l.name, key, cost)
	}
	return l.c.Take(ctx, l.name, key, l.rate, l.burst, cost)
}

// Refund gives cost requests back to key's bucket (Client.Refund).
func (l *Limiter) Refund(ctx context.Context, key string, cost int) (bool, error) {
	return l.c.Refund(ctx, l.name, key, cost)
}

// Request is a request of this limiter for key, for TakeAll.
func (l *Limiter) Request(key string, cost int) Request {
	return Request{Limiter: l.name, Key: key, Rate: l.rate, Burst: l.burst, Cost: cost}
}

// Limit answers the limiter's rate and burst: a policy's from the client's
// last read of rl_policies (ok false when it has none).
func (l *Limiter) Limit() (rate float64, burst int, ok bool) {
	if !l.policy {
		return l.rate, l.burst, true
	}
	return l.c.PolicyLimit(l.name)
}

// PolicyLimit answers the rate and burst of limiter's policy as the client
// last read them (ok false when it has not read one).
func (c *Client) PolicyLimit(limiter string) (rate float64, burst int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.policies[limiter]
	return p.rate, int(p.burst), ok
}

// SetHeaders sets on h the fields of decision d of this limiter (Headers);
// when the limit is not known (a policy never read), only Retry-After.
func (l *Limiter) SetHeaders(h http.Header, d Decision) {
	rate, burst, ok := l.Limit()
	fields, err := Headers(l.name, rate, burst, d)
	if !ok || err != nil {
		fields = map[string]string{}
		if !d.Allowed && !math.IsInf(d.RetryAfter, 1) {
			fields["Retry-After"] = strconv.FormatInt(ceilSeconds(secondsToUs(d.RetryAfter, math.MaxInt64)), 10)
		}
	}
	for k, v := range fields {
		h.Set(k, v)
	}
}

func ceilSeconds(us int64) int64 {
	return (us + 999999) / 1000000
}

// Headers answers the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-
// headers-11) and Retry-After for decision d of limiter under the limit
// (rate, burst), as SQL's rl_headers(d, limiter, rate, burst) does:
// RateLimit-Policy "<limiter>";q=<burst>;w=<max(1, ceil(burst / rate))>,
// RateLimit "<limiter>";r=<remaining>[;t=<seconds until the next cell is
// back>], and on a denial that can be retried, Retry-After (never earlier
// than t).  A limiter name that is not printable ASCII is refused.
func Headers(limiter string, rate float64, burst int, d Decision) (map[string]string, error) {
	var name strings.Builder
	name.WriteByte('"')
	for i := 0; i < len(limiter); i++ {
		c := limiter[i]
		if c < 0x20 || c > 0x7e {
			return nil, &Error{Limiter: limiter, Code: "22023", kind: ErrBadArgument,
				Message: "limiter must be printable ASCII to name an HTTP rate limit"}
		}
		if c == '"' || c == '\\' {
			name.WriteByte('\\')
		}
		name.WriteByte(c)
	}
	name.WriteByte('"')
	l, e := checkLimit(rate, burst)
	if e != nil {
		e.Limiter = limiter
		return nil, e
	}
	if d.Remaining < 0 || d.Remaining > burst {
		return nil, &Error{Limiter: limiter, Code: "22023", kind: ErrBadArgument,
			Message: fmt.Sprintf("d.remaining must be between 0 and burst, not %d", d.Remaining)}
	}
	window := math.Max(1, math.Ceil(float64(burst)/rate))
	out := map[string]string{
		"RateLimit-Policy": fmt.Sprintf("%s;q=%d;w=%d", name.String(), burst, int64(window)),
	}
	value := fmt.Sprintf("%s;r=%d", name.String(), d.Remaining)
	var nextCell int64
	if reset := int64(math.Round(d.ResetAfter * 1e6)); reset > 0 {
		back := reset % l.intervalUs
		if back == 0 {
			back = l.intervalUs
		}
		nextCell = ceilSeconds(back)
		value += fmt.Sprintf(";t=%d", nextCell)
	}
	out["RateLimit"] = value
	if !d.Allowed && !math.IsInf(d.RetryAfter, 1) {
		retry := ceilSeconds(int64(math.Round(d.RetryAfter * 1e6)))
		if retry < nextCell {
			retry = nextCell
		}
		out["Retry-After"] = strconv.FormatInt(retry, 10)
	}
	return out, nil
}

// MiddlewareOptions configure Middleware.
type MiddlewareOptions struct {
	// TrustedProxies: the addresses and CIDR ranges of your own proxies,
	// whose X-Forwarded-For entries are believed (ParseTrustedProxies);
	// empty trusts nobody: the key is the peer's address.
	TrustedProxies []string
	// Key makes the key from the request and its client address; nil:
	// IPKey(client, 64).
	Key func(r *http.Request, client netip.Addr) string
	// Cost of each request: 1 when 0.
	Cost int
	// Denied writes the 429 response after the fields are set; nil: a
	// plain-text "Too Many Requests".
	Denied http.Handler
}

// Middleware limits each request by l, keyed by its client address as
// rl_client_ip finds it behind opts.TrustedProxies.  Every response carries
// the RateLimit fields; a denied request is answered 429 with Retry-After,
// and never reaches next.  Bad use (an *Error from the limiter) is answered
// 500.  The error is for an invalid TrustedProxies.
func Middleware(l *Limiter, opts MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	trusted, err := ParseTrustedProxies(opts.TrustedProxies)
	if err != nil {
		return nil, err
	}
	cost := opts.Cost
	if cost == 0 {
		cost = 1
	}
	key := opts.Key
	if key == nil {
		key = func(_ *http.Request, ip netip.Addr) string {
			k, _ := IPKey(ip, 64)
			return k
		}
	}
	denied := opts.Denied
	if denied == nil {
		denied = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		})
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ip := RequestIP(r, trusted)
			k := r.RemoteAddr // a peer without an IP address (a Unix socket)
			if ip.IsValid() {
				k = key(r, ip)
			}
			d, err := l.TakeN(r.Context(), k, cost)
			if err != nil {
				http.Error(w, "rate limit: "+err.Error(), http.StatusInternalServerError)
				return
			}
			l.SetHeaders(w.Header(), d)
			if !d.Allowed {
				w.Header().Del("Content-Length")
				denied.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// RequestIP is the client address of r: ClientIP of its peer and its
// X-Forwarded-For lines, joined with commas in the order they came.  It
// is invalid for a peer without an IP address.
func RequestIP(r *http.Request, trusted TrustedProxies) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	remote, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ClientIP(remote, strings.Join(r.Header.Values("X-Forwarded-For"), ","), trusted)
}
