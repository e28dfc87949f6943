package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
)

// TestHeadersEqualServer: Headers answers what SQL's rl_headers answers.
func TestHeadersEqualServer(t *testing.T) {
	db := sqlConn(t, env(t, "RL_GO_TABLE"))
	inf := math.Inf(1)
	cases := []struct {
		limiter string
		rate    float64
		burst   int
		d       Decision
	}{
		{"login", 10.0 / 900, 10, Decision{Allowed: true, Remaining: 10}},
		{"login", 10.0 / 900, 10, Decision{Allowed: true, Remaining: 7, ResetAfter: 270}},
		{"login", 10.0 / 900, 10, Decision{Allowed: true, Remaining: 7, ResetAfter: 269.5}},
		{"login", 10.0 / 900, 10, Decision{Remaining: 0, RetryAfter: 12.25, ResetAfter: 900}},
		{"api", 5, 3, Decision{Remaining: 0, RetryAfter: 0.1, ResetAfter: 0.6}},
		{"api", 5, 3, Decision{Remaining: 1, RetryAfter: inf, ResetAfter: 0.4}},
		{"slow", 1.0 / 86400, 1, Decision{Remaining: 0, RetryAfter: 86399.999999, ResetAfter: 86399.999999}},
		{`quo"te\back`, 1, 1, Decision{Allowed: true, Remaining: 1}},
	}
	for _, c := range cases {
		got, err := Headers(c.limiter, c.rate, c.burst, c.d)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		var retry interface{} = c.d.RetryAfter
		if math.IsInf(c.d.RetryAfter, 1) {
			retry = nil
		}
		var text string
		if err := db.QueryRow(context.Background(),
			"SELECT rl_headers(ROW($1, $2, $3, $4)::rl_decision, $5, $6, $7)::text",
			c.d.Allowed, c.d.Remaining, retry, c.d.ResetAfter, c.limiter, c.rate, c.burst).Scan(&text); err != nil {
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
	if _, err := Headers("é", 1, 1, Decision{}); !errors.Is(err, ErrBadArgument) {
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
		l := c.Limiter(uniqueName(t), 1.0/60, 2)
		if _, err := Middleware(l, MiddlewareOptions{TrustedProxies: []string{"0.0.0.0/0"}}); !errors.Is(err, ErrBadArgument) {
			t.Errorf("trusting everyone: %v", err)
		}
		mw, err := Middleware(l, MiddlewareOptions{TrustedProxies: []string{"10.0.0.0/8"}})
		if err != nil {
			t.Fatal(err)
		}
		served := 0
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
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
