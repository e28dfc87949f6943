// Limiters as values (the Taker interface), the HTTP fields of a decision
// (the values SQL's rl_headers answers, src/http.c), and a net/http
// middleware that answers 429.

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Taker decides one request for a key.  The error is for bad use (an
// *Error a retry cannot fix) and for ctx ending first; an outage is a
// decision, never an error.
type Taker interface {
	Take(ctx context.Context, key string) (Decision, error)
}

// Limiter is one limiter of a client: explicit (Client.Limiter) or by
// policy (Client.Policy).  It is a Taker.
type Limiter struct {
	c      *Client
	name   string
	limit  Limit
	policy bool
}

// Limiter is the limiter name at limit (rl_take's explicit form: for a
// limiter without a row in rl_policies).
func (c *Client) Limiter(name string, limit Limit) *Limiter {
	return &Limiter{c: c, name: name, limit: limit}
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
	return l.c.Take(ctx, l.name, key, l.limit, cost)
}

// Refund gives cost requests back to key's bucket (Client.Refund).
func (l *Limiter) Refund(ctx context.Context, key string, cost int) (bool, error) {
	return l.c.Refund(ctx, l.name, key, cost)
}

// Request is a request of this limiter for key, for TakeAll.
func (l *Limiter) Request(key string, cost int) Request {
	return Request{Limiter: l.name, Key: key, Limit: l.limit, Cost: cost}
}

// Limit answers the limiter's limit: a policy's from the client's last read
// of rl_policies (ok false when it has none).
func (l *Limiter) Limit() (Limit, bool) {
	if !l.policy {
		return l.limit, true
	}
	return l.c.PolicyLimit(l.name)
}

// PolicyLimit answers the limit of limiter's policy as the client last read
// it (ok false when it has not read one).
func (c *Client) PolicyLimit(limiter string) (Limit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.policies[limiter]
	return Limit{Rate: p.rate, Burst: int(p.burst)}, ok
}

// SetHeaders sets on h the fields of decision d of this limiter (Headers);
// when the limit is not known (a policy never read), only Retry-After.
func (l *Limiter) SetHeaders(h http.Header, d Decision) {
	limit, ok := l.Limit()
	fields, err := Headers(l.name, limit, d)
	if !ok || err != nil {
		fields = map[string]string{}
		if !d.Allowed && d.RetryAfter != Never {
			fields["Retry-After"] = strconv.FormatInt(ceilSeconds(d.RetryAfter.Microseconds()), 10)
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
// headers-11) and Retry-After for decision d of limiter under limit, as
// SQL's rl_headers(d, limiter, rate, burst) does:
// RateLimit-Policy "<limiter>";q=<burst>;w=<max(1, ceil(burst / rate))>,
// RateLimit "<limiter>";r=<remaining>[;t=<seconds until the next cell is
// back>], and on a denial that can be retried, Retry-After (never earlier
// than t).  A limiter name that is not printable ASCII is refused.
func Headers(limiter string, limit Limit, d Decision) (map[string]string, error) {
	rate, burst := limit.Rate, limit.Burst
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
	if reset := d.ResetAfter.Microseconds(); reset > 0 {
		back := reset % l.intervalUs
		if back == 0 {
			back = l.intervalUs
		}
		nextCell = ceilSeconds(back)
		value += fmt.Sprintf(";t=%d", nextCell)
	}
	out["RateLimit"] = value
	if !d.Allowed && d.RetryAfter != Never {
		retry := ceilSeconds(d.RetryAfter.Microseconds())
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
	// whose X-Forwarded-For (or Forwarded) entries are believed
	// (ParseTrustedProxies); empty trusts nobody: the key is the peer's
	// address.
	TrustedProxies []string
	// Forwarded: read the RFC 7239 Forwarded header instead of
	// X-Forwarded-For (RequestIPForwarded).
	Forwarded bool
	// Key makes the key from the request and its client address (invalid
	// for a peer without an IP address); an error goes to ErrorHandler and
	// the request does not reach next.  nil: IPKey(client, 64), or the
	// peer's RemoteAddr when it has no IP address.
	Key func(r *http.Request, client netip.Addr) (string, error)
	// Cost of each request: 1 when 0.
	Cost int
	// Denied writes the 429 response after the fields are set; the
	// decision is in its request's context (DecisionFromContext).  nil: a
	// plain-text "Too Many Requests".
	Denied http.Handler
	// ErrorHandler answers a request the middleware could not decide: a
	// Key error, bad use (an *Error), or the request's own context ending
	// (an error wrapping its ctx.Err()).  nil: the error is logged with
	// Logger and the answer is a plain-text 500 "Internal Server Error",
	// which never shows the error.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)
	// Logger of the default ErrorHandler: nil is slog.Default().
	Logger *slog.Logger
}

type decisionKey struct{}

// DecisionFromContext answers the decision Middleware made for the request
// whose context ctx is (ok false outside the middleware).
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

// Middleware limits each request by every one of limiters, all or nothing
// in one decision (TakeAll, or TakeAllPolicy for limiters made by
// Client.Policy; the two kinds cannot be mixed), each with the key of the
// request.  The key is its client address as rl_client_ip finds it behind
// opts.TrustedProxies, or what opts.Key makes.  Every response carries the
// RateLimit fields of the binding limiter; a denied request is answered 429
// with Retry-After and never reaches next; an allowed one reaches next with
// the decision in its context (DecisionFromContext).  The error is for
// invalid options.
func Middleware(opts MiddlewareOptions, limiters ...*Limiter) (func(http.Handler) http.Handler, error) {
	if len(limiters) < 1 || len(limiters) > maxRequests {
		return nil, errors.New("ratelimit: Middleware needs 1 to 16 limiters")
	}
	for _, l := range limiters[1:] {
		if l.policy != limiters[0].policy || l.c != limiters[0].c {
			return nil, errors.New("ratelimit: Middleware's limiters must be of one client, and all by policy or all explicit")
		}
	}
	trusted, err := ParseTrustedProxies(opts.TrustedProxies)
	if err != nil {
		return nil, err
	}
	if opts.Cost < 0 {
		return nil, errors.New("ratelimit: Middleware's Cost must not be negative")
	}
	cost := opts.Cost
	if cost == 0 {
		cost = 1
	}
	key := opts.Key
	if key == nil {
		key = func(r *http.Request, ip netip.Addr) (string, error) {
			if !ip.IsValid() {
				return r.RemoteAddr, nil // a peer without an IP address (a Unix socket)
			}
			return IPKey(ip, 64)
		}
	}
	clientIP := RequestIP
	if opts.Forwarded {
		clientIP = RequestIPForwarded
	}
	denied := opts.Denied
	if denied == nil {
		denied = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		})
	}
	onError := opts.ErrorHandler
	if onError == nil {
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		onError = func(w http.ResponseWriter, r *http.Request, err error) {
			logger.ErrorContext(r.Context(), "ratelimit: the request was not decided",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		}
	}
	take := func(ctx context.Context, k string) (Decision, error) { return limiters[0].TakeN(ctx, k, cost) }
	if len(limiters) > 1 {
		take = func(ctx context.Context, k string) (Decision, error) {
			requests := make([]Request, len(limiters))
			for i, l := range limiters {
				requests[i] = l.Request(k, cost)
			}
			if limiters[0].policy {
				return limiters[0].c.TakeAllPolicy(ctx, requests)
			}
			return limiters[0].c.TakeAll(ctx, requests)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, err := key(r, clientIP(r, trusted))
			if err != nil {
				onError(w, r, err)
				return
			}
			d, err := take(r.Context(), k)
			if err != nil {
				onError(w, r, err)
				return
			}
			limiters[d.Binding].SetHeaders(w.Header(), d)
			r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, d))
			if !d.Allowed {
				w.Header().Del("Content-Length")
				denied.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// peerIP is the IP address of r's peer, invalid for a peer without one.
func peerIP(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	remote, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return remote
}

// RequestIP is the client address of r: ClientIP of its peer and its
// X-Forwarded-For lines, joined with commas in the order they came.  It
// is invalid for a peer without an IP address.
func RequestIP(r *http.Request, trusted TrustedProxies) netip.Addr {
	return ClientIP(peerIP(r), strings.Join(r.Header.Values("X-Forwarded-For"), ","), trusted)
}

// RequestIPForwarded is RequestIP by r's RFC 7239 Forwarded lines
// (ClientIPForwarded).
func RequestIPForwarded(r *http.Request, trusted TrustedProxies) netip.Addr {
	return ClientIPForwarded(peerIP(r), strings.Join(r.Header.Values("Forwarded"), ","), trusted)
}
