package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"time"

	ratelimit "github.com/ratelimit/ratelimit/clients/go"
)

// A client on DATABASE_URL, one decision, and what to do with it.
func ExampleNew() {
	rl, err := ratelimit.New(os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	d, err := rl.Take(context.Background(), "api", "user:42", ratelimit.PerMinute(100), 1)
	if err != nil { // bad use, or the context ended: never an outage
		log.Fatal(err)
	}
	if !d.Allowed {
		fmt.Printf("try again in %v\n", d.RetryAfter.Round(time.Second))
	}
}

func ExampleEvery() {
	fmt.Printf("%+v\n", ratelimit.PerMinute(6))
	fmt.Printf("%+v\n", ratelimit.Every(time.Hour, 36).WithBurst(3))
	// Output:
	// {Rate:0.1 Burst:6}
	// {Rate:0.01 Burst:3}
}

func ExampleHeaders() {
	d := ratelimit.Decision{Allowed: false, Remaining: 0, RetryAfter: 12250 * time.Millisecond, ResetAfter: 15 * time.Minute}
	h, _ := ratelimit.Headers("login", ratelimit.Every(15*time.Minute, 10), d)
	fmt.Println(h["RateLimit-Policy"])
	fmt.Println(h["RateLimit"])
	fmt.Println(h["Retry-After"])
	// Output:
	// "login";q=10;w=900
	// "login";r=0;t=90
	// 90
}

func ExampleClientIPForwarded() {
	proxies, _ := ratelimit.ParseTrustedProxies([]string{"10.0.0.0/8"})
	client := ratelimit.ClientIPForwarded(netip.MustParseAddr("10.0.0.1"),
		`for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711", for=10.0.0.2`, proxies)
	key, _ := ratelimit.IPKey(client, 64)
	fmt.Println(client, key)
	// Output: 2001:db8:cafe::17 2001:db8:cafe::/64
}

// Two limits of every request, all or nothing, keyed by an API token: a
// request without one is answered 401 by the error handler.  The database
// here is down, so the client decides in memory, at the same limits.
func ExampleMiddleware() {
	rl, _ := ratelimit.New("host=/nonexistent", &ratelimit.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	defer rl.Close()
	errNoToken := errors.New("no API token")
	mw, err := ratelimit.Middleware(ratelimit.MiddlewareOptions{
		Key: func(r *http.Request, _ netip.Addr) (string, error) {
			if token := r.Header.Get("X-Api-Token"); token != "" {
				return token, nil
			}
			return "", errNoToken
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errNoToken) {
				http.Error(w, "an API token, please", http.StatusUnauthorized)
				return
			}
			http.Error(w, "internal error", http.StatusInternalServerError)
		},
	}, rl.Limiter("api_second", ratelimit.PerSecond(10)), rl.Limiter("api_hour", ratelimit.PerHour(1)))
	if err != nil {
		log.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := ratelimit.DecisionFromContext(r.Context())
		fmt.Fprintf(w, "hello; %d left by %s\n", d.Remaining, d.Limiter)
	}))
	for _, token := range []string{"t1", "t1", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		if token != "" {
			r.Header.Set("X-Api-Token", token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 200 hello; 0 left by api_hour
	// 429 Too Many Requests
	// 401 an API token, please
}
