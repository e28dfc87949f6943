package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeadersEqualServer: Headers answers what SQL's rl_headers answers.
func TestHeadersEqualServer(t *testing.T) {
	db := sqlConn(t, env(t, "RL_GO_TABLE"))
	cases := []struct {
		limiter string
		rate    float64
		burst   int
		d       Decision
	}{
		{"login", 10.0 / 900, 10, Decision{Allowed: true, Remaining: 10}},
		{"login", 10.0 / 900, 10, Decision{Allowed: true, Remaining: 7, ResetAfter: 270 * time.Second}},
		{"login", 10.0 / 900, 10, Decision{Allowed: true, Remaining: 7, ResetAfter: 269500 * time.Millisecond}},
		{"login", 10.0 / 900, 10, Decision{Remaining: 0, RetryAfter: 12250 * time.Millisecond, ResetAfter: 900 * time.Second}},
		{"api", 5, 3, Decision{Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: 600 * time.Millisecond}},
		{"api", 5, 3, Decision{Remaining: 1, RetryAfter: Never, ResetAfter: 400 * time.Millisecond}},
		{"slow", 1.0 / 86400, 1, Decision{Remaining: 0, RetryAfter: 86399999999 * time.Microsecond,
			ResetAfter: 86399999999 * time.Microsecond}},
		{`quo"te\back`, 1, 1, Decision{Allowed: true, Remaining: 1}},
	}
	for _, c := range cases {
		got, err := Headers(c.limiter, Limit{c.rate, c.burst}, c.d)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		var retry interface{} = c.d.RetryAfter.Seconds()
		if c.d.RetryAfter == Never {
			retry = nil
		}
		var text string
		if err := db.QueryRow(context.Background(),
			"SELECT rl_headers(ROW($1, $2, $3, $4)::rl_decision, $5, $6, $7)::text",
			c.d.Allowed, c.d.Remaining, retry, c.d.ResetAfter.Seconds(), c.limiter, c.rate, c.burst).Scan(&text); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		if err := json.Unmarshal([]byte(text), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: the client says %v, rl_headers %v", c, got, want)
		}
	}
	if _, err := Headers("é", Limit{1, 1}, Decision{}); !errors.Is(err, ErrBadArgument) {
		t.Errorf("a name that is not printable ASCII: %v", err)
	}
}

// TestMiddleware: the net/http middleware keys by the client address
// behind trusted proxies, never by a header from an untrusted peer, answers
// 429 with Retry-After and the RateLimit fields (those of the decision),
// and never calls the handler for a denied request; in both stores.
func TestMiddleware(t *testing.T) {
	stores(t, func(t *testing.T, conn string) {
		c, _ := newClient(t, conn, nil)
		db := sqlConn(t, conn)
		l := c.Limiter(uniqueName(t), Limit{Rate: 1.0 / 60, Burst: 2})
		if _, err := Middleware(MiddlewareOptions{TrustedProxies: []string{"0.0.0.0/0"}}, l); !errors.Is(err, ErrBadArgument) {
			t.Errorf("trusting everyone: %v", err)
		}
		mw, err := Middleware(MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/8"}}, l)
		if err != nil {
			t.Fatal(err)
		}
		served := 0
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d, ok := DecisionFromContext(r.Context()); !ok || !d.Allowed || d.Limiter != l.Name() {
				t.Errorf("the handler's context holds %+v, %v", d, ok)
			}
			served++
		}))
		do := func(peer, xff string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = peer
			if xff != "" {
				r.Header.Add("X-Forwarded-For", "198.51.100.1")
				r.Header.Add("X-Forwarded-For", xff)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		codes := []int{}
		var last *httptest.ResponseRecorder
		for i := 0; i < 3; i++ {
			last = do("10.0.0.1:4711", "203.0.113.7, 10.0.0.2")
			codes = append(codes, last.Code)
		}
		if !reflect.DeepEqual(codes, []int{200, 200, 429}) || served != 2 {
			t.Errorf("codes %v, %d served; want 200 200 429, 2 served", codes, served)
		}
		retry, err := strconv.Atoi(last.Header().Get("Retry-After"))
		if err != nil || retry < 1 || retry > 60 || last.Header().Get("RateLimit-Policy") == "" ||
			last.Header().Get("RateLimit") == "" {
			t.Errorf("the 429's fields: %v", last.Header())
		}
		// the key was the address the trusted proxy saw
		var remaining int
		if err := db.QueryRow(context.Background(), "SELECT remaining FROM rl_take($1, '203.0.113.7', 1.0/60, 2, 0)",
			l.Name()).Scan(&remaining); err != nil || remaining != 0 {
			t.Errorf("203.0.113.7 has %d left (%v), want 0", remaining, err)
		}
		// an untrusted peer's header is not believed
		if w := do("192.0.2.9:80", "203.0.113.7"); w.Code != 200 {
			t.Errorf("an untrusted peer naming 203.0.113.7: %d", w.Code)
		}
		if w := do("[2001:db8:1:2::9]:80", ""); w.Code != 200 ||
			w.Header().Get("RateLimit") != `"`+l.Name()+`";r=1;t=60` {
			t.Errorf("an IPv6 peer: %d %v", w.Code, w.Header())
		}
		if err := db.QueryRow(context.Background(), "SELECT remaining FROM rl_take($1, '2001:db8:1:2::/64', 1.0/60, 2, 0)",
			l.Name()).Scan(&remaining); err != nil || remaining != 1 {
			t.Errorf("the IPv6 peer's /64 has %d left (%v), want 1", remaining, err)
		}
	})
}

// TestMiddlewareErrors: a key function's error and bad use go to the
// ErrorHandler; the default one answers 500 without the error's text.
func TestMiddlewareErrors(t *testing.T) {
	c, _ := newClient(t, env(t, "RL_GO_TABLE"), nil)
	served := 0
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })
	secret := errors.New("the key's secret reason")
	var handled error
	mw, err := Middleware(MiddlewareOptions{
		Key: func(*http.Request, netip.Addr) (string, error) { return "", secret },
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			handled = err
			w.WriteHeader(http.StatusServiceUnavailable)
		}}, c.Limiter(uniqueName(t), PerMinute(2)))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	mw(next).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusServiceUnavailable || !errors.Is(handled, secret) {
		t.Errorf("a failing key: %d, the handler got %v", w.Code, handled)
	}
	// a limit rl_take refuses, by the default handler
	mw, err = Middleware(MiddlewareOptions{}, c.Limiter(uniqueName(t), Limit{Rate: math.Inf(1), Burst: 1}))
	if err != nil {
		t.Fatal(err)
	}
	w = httptest.NewRecorder()
	mw(next).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if body := w.Body.String(); w.Code != 500 || strings.Contains(body, "rate") || strings.Contains(body, "SQLSTATE") {
		t.Errorf("bad use: %d %q, want a 500 that does not show the error", w.Code, body)
	}
	if served != 0 {
		t.Errorf("%d requests reached the handler", served)
	}
	if _, err := Middleware(MiddlewareOptions{}, c.Limiter("a", PerMinute(1)), c.Policy("b")); err == nil {
		t.Errorf("explicit and policy limiters mixed: no error")
	}
}

// TestMiddlewareAll: several limiters decide all or nothing: a request the
// second refuses takes nothing from the first, and the 429 carries the
// binding limiter's fields.
func TestMiddlewareAll(t *testing.T) {
	stores(t, func(t *testing.T, conn string) {
		c, _ := newClient(t, conn, nil)
		db := sqlConn(t, conn)
		wide, narrow := c.Limiter(uniqueName(t), PerMinute(5)), c.Limiter(uniqueName(t), PerHour(1))
		mw, err := Middleware(MiddlewareOptions{}, wide, narrow)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		codes := []int{}
		var last *httptest.ResponseRecorder
		for i := 0; i < 3; i++ {
			last = httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			h.ServeHTTP(last, r)
			codes = append(codes, last.Code)
		}
		if !reflect.DeepEqual(codes, []int{200, 429, 429}) ||
			!strings.HasPrefix(last.Header().Get("RateLimit"), `"`+narrow.Name()+`"`) {
			t.Errorf("codes %v, fields %v; want 200 429 429 by %s", codes, last.Header(), narrow.Name())
		}
		var remaining int
		if err := db.QueryRow(context.Background(), "SELECT remaining FROM rl_take($1, '192.0.2.1', 5.0/60, 5, 0)",
			wide.Name()).Scan(&remaining); err != nil || remaining != 4 {
			t.Errorf("the wide limit has %d left (%v), want 4: the denials took from it", remaining, err)
		}
	})
}

// TestMiddlewareForwarded: with Forwarded, the key is the for= of RFC 7239
// Forwarded behind the trusted proxies, and X-Forwarded-For is not read.
func TestMiddlewareForwarded(t *testing.T) {
	conn := env(t, "RL_GO_TABLE")
	c, _ := newClient(t, conn, nil)
	db := sqlConn(t, conn)
	l := c.Limiter(uniqueName(t), PerMinute(2))
	mw, err := Middleware(MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/8"}, Forwarded: true}, l)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:4711"
	r.Header.Add("Forwarded", `for=198.51.100.1`)
	r.Header.Add("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`)
	r.Header.Add("X-Forwarded-For", "203.0.113.7")
	w := httptest.NewRecorder()
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
	var remaining int
	if err := db.QueryRow(context.Background(), "SELECT remaining FROM rl_take($1, '2001:db8:cafe::/64', 2.0/60, 2, 0)",
		l.Name()).Scan(&remaining); w.Code != 200 || err != nil || remaining != 1 {
		t.Errorf("%d; the Forwarded client's /64 has %d left (%v), want 1", w.Code, remaining, err)
	}
}
