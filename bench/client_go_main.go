// Decisions per second through the Go client (clients/go): its pre-check
// and fallback paths, and its database path against the bare driver call
// (pgxpool's QueryRow of the same rl_take), at 1 and 8 goroutines.  Built
// and run by bench/client_go.  The deadline is 5 s instead of 250 ms, so
// that a stall of a busy machine does not move decisions to another path
// mid-measurement.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	ratelimit "github.com/ratelimit/ratelimit/clients/go"
)

const takeSQL = "SELECT allowed, remaining, retry_after, reset_after FROM rl_take($1, $2, $3, $4, $5)"

// run calls f from goroutines for seconds and answers calls per second.
func run(goroutines int, seconds float64, f func(g, i int) bool) (float64, bool) {
	var total int64
	var failed int32
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	start := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			n := 0
			for ; time.Now().Before(stop); n++ {
				if !f(g, n) {
					atomic.StoreInt32(&failed, 1)
				}
			}
			atomic.AddInt64(&total, int64(n))
		}(g)
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds(), failed == 0
}

func report(what string, goroutines int, rate float64, ok bool, c *ratelimit.Client) {
	extra := ""
	if c != nil {
		s := c.Stats()
		extra = fmt.Sprintf("  (database %d, local %d, fallback %d)", s.Database, s.Local, s.Fallback)
	}
	if !ok {
		extra += "  FAILURES"
	}
	fmt.Printf("%-24s %d goroutine%s %10.0f decisions/s%s\n", what, goroutines,
		map[bool]string{true: ": ", false: "s:"}[goroutines == 1], rate, extra)
}

func client(conn string, goroutines int) *ratelimit.Client {
	c, err := ratelimit.New(conn,
		&ratelimit.Options{Deadline: 5 * time.Second, PoolSize: goroutines, Warn: func(string, string) {}})
	if err != nil {
		panic(err)
	}
	return c
}

func main() {
	conn := os.Args[1]
	seconds, _ := strconv.ParseFloat(os.Args[2], 64)
	ctx := context.Background()
	for _, n := range []int{1, 8} {
		// many keys: no two goroutines wait for one row
		c := client(conn, n)
		r, ok := run(n, seconds, func(g, i int) bool {
			d, err := c.Take(ctx, "godb", fmt.Sprint(g, ":", i), ratelimit.PerSecond(1000000), 1)
			return err == nil && d.Source == ratelimit.SourceDatabase
		})
		report("database (client)", n, r, ok, c)
		c.Close()

		pool, err := pgxpool.New(ctx, fmt.Sprintf("%s pool_max_conns=%d", conn, n))
		if err != nil {
			panic(err)
		}
		r, ok = run(n, seconds, func(g, i int) bool {
			var allowed bool
			var remaining int
			var retry, reset *float64
			err := pool.QueryRow(ctx, takeSQL, "gobare", fmt.Sprint(g, ":", i), 1000000.0, 1000000, 1).
				Scan(&allowed, &remaining, &retry, &reset)
			return err == nil
		})
		report("database (bare pgxpool)", n, r, ok, nil)
		pool.Close()
	}
	for _, n := range []int{1, 8} {
		// one key per goroutine, far over its limit
		c := client(conn, n)
		r, ok := run(n, seconds, func(g, i int) bool {
			d, err := c.Take(ctx, "gopre", fmt.Sprint(g), ratelimit.PerHour(1), 1)
			return err == nil && (d.Source == ratelimit.SourceLocal || i < 2)
		})
		report("pre-check", n, r, ok, c)
		c.Close()
	}
	for _, n := range []int{1, 8} {
		// no database behind the connection string: decided in memory
		c := client("host=/nonexistent port=1", n)
		r, ok := run(n, seconds, func(g, i int) bool {
			d, err := c.Take(ctx, "gofb", fmt.Sprint(g, ":", i%1000), ratelimit.PerSecond(1000000), 1)
			return err == nil && d.Source == ratelimit.SourceFallback
		})
		report("fallback", n, r, ok, c)
		c.Close()
	}
}
