package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDecisionsEqualServer: the same sequence through the client and
// through SQL on a twin key gives the same decisions, in every form, in
// both stores; a shadow policy never denies; the server's bucket holds
// what the client was told.
func TestDecisionsEqualServer(t *testing.T) {
	stores(t, func(t *testing.T, conn string) {
		c, _ := newClient(t, conn, nil)
		db := sqlConn(t, conn)
		ctx := context.Background()
		explicit, pol, shadow := uniqueName(t), uniqueName(t), uniqueName(t)
		exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ($1, 1.0/60, 2)", pol)
		exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst, shadow) VALUES ($1, 1.0/60, 1, true)", shadow)

		type step struct {
			client func() (Decision, error)
			sql    string
			args   []interface{}
		}
		one := "SELECT allowed, remaining, retry_after, reset_after, $1::text FROM "
		steps := []step{}
		for i := 0; i < 5; i++ {
			cost := []int{1, 2, 1, 0, 4}[i]
			steps = append(steps, step{
				func() (Decision, error) { return c.Take(ctx, explicit, "client", Limit{1.0 / 60, 3}, cost) },
				one + "rl_take($1, 'sql', 1.0/60, 3, $2)", []interface{}{explicit, cost}})
		}
		for i := 0; i < 4; i++ {
			steps = append(steps, step{
				func() (Decision, error) { return c.TakePolicy(ctx, pol, "client", 1) },
				one + "rl_take($1, 'sql', 1)", []interface{}{pol}})
		}
		for i := 0; i < 3; i++ {
			steps = append(steps, step{
				func() (Decision, error) { return c.TakePolicy(ctx, shadow, "client", 1) },
				one + "rl_take($1, 'sql', 1)", []interface{}{shadow}})
		}
		all := explicit + "_all"
		for i := 0; i < 4; i++ {
			steps = append(steps, step{
				func() (Decision, error) {
					return c.TakeAll(ctx, []Request{{all, "client", Limit{1.0 / 60, 5}, 1}, {all + "_b", "client", Limit{1.0 / 30, 2}, 1}})
				},
				"SELECT allowed, remaining, retry_after, reset_after, limiter FROM rl_take_all(ARRAY[$1, $1 || '_b'], ARRAY['sql', 'sql'], ARRAY[1.0/60, 1.0/30]::float8[], ARRAY[5, 2], NULL)",
				[]interface{}{all}})
		}
		for i := 0; i < 4; i++ {
			steps = append(steps, step{
				func() (Decision, error) {
					return c.TakeAllPolicy(ctx, []Request{{Limiter: pol, Key: "client2", Cost: 1}, {Limiter: shadow, Key: "client2", Cost: 1}})
				},
				"SELECT allowed, remaining, retry_after, reset_after, limiter FROM rl_take_all(ARRAY[$1, $2], ARRAY['sql2', 'sql2'], NULL)",
				[]interface{}{pol, shadow}})
		}
		for i, s := range steps {
			got, err := s.client()
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			var want Decision
			var retry *float64
			var reset float64
			if err := db.QueryRow(ctx, s.sql, s.args...).Scan(&want.Allowed, &want.Remaining, &retry, &reset, &want.Limiter); err != nil {
				t.Fatalf("step %d: %s: %v", i, s.sql, err)
			}
			wantRetry := math.Inf(1)
			if retry != nil {
				wantRetry = *retry
			}
			if got.Source != SourceDatabase || got.Allowed != want.Allowed || got.Remaining != want.Remaining ||
				got.Limiter != want.Limiter || !near(got.RetryAfter, wantRetry, 0.5) ||
				!near(got.ResetAfter, reset, 0.5) {
				t.Errorf("step %d: the client says %+v, the server %+v retry_after %v reset_after %v", i, got, want, wantRetry, reset)
			}
		}
		// the server's bucket holds what the client was told
		var remaining int
		if err := db.QueryRow(ctx, "SELECT remaining FROM rl_take($1, 'client', 1.0/60, 3, 0)", explicit).Scan(&remaining); err != nil {
			t.Fatal(err)
		}
		if remaining != 0 {
			t.Errorf("the server's bucket has %d left, the client was told 0", remaining)
		}
		if s := c.Stats(); s.Database != uint64(len(steps)) || s.Local != 0 || s.Fallback != 0 {
			t.Errorf("counters %+v: every decision should be the database's", s)
		}
	})
}

// TestBadUse: arguments rl_take refuses are refused by the client with the
// server's SQLSTATE and without a round trip; what only the server knows
// (an unknown policy, the explicit form of a policy's limiter) is an error
// naming the limiter, with no fallback and no backoff.
func TestBadUse(t *testing.T) {
	conn := env(t, "RL_GO_TABLE")
	c, w := newClient(t, conn, nil)
	db := sqlConn(t, conn)
	ctx := context.Background()
	cases := []struct {
		limiter, key string
		rate         float64
		burst, cost  int
	}{
		{"", "k", 1, 1, 1}, {"l", "", 1, 1, 1}, {"l", "k", 0, 1, 1}, {"l", "k", math.NaN(), 1, 1},
		{"l", "k", math.Inf(1), 1, 1}, {"l", "k", 1000001, 1, 1}, {"l", "k", 1, 0, 1},
		{"l", "k", 1, 1, -1}, {"l", "k", 1e-9, math.MaxInt32, 1}, {"l\xff", "k", 1, 1, 1},
	}
	for _, k := range cases {
		_, err := c.Take(ctx, k.limiter, k.key, Limit{k.rate, k.burst}, k.cost)
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrBadArgument) || e.Limiter != k.limiter {
			t.Errorf("Take%+v: %v, want a bad argument", k, err)
			continue
		}
		if k.limiter == "l\xff" {
			continue // pgx cannot send it to compare
		}
		_, serr := db.Exec(ctx, "SELECT rl_take($1, $2, $3, $4, $5)", k.limiter, k.key, k.rate, k.burst, k.cost)
		if serr == nil || !contains(serr.Error(), "SQLSTATE "+e.Code) || !contains(serr.Error(), e.Message[:12]) {
			t.Errorf("Take%+v: the client says %v, the server %v", k, err, serr)
		}
	}
	if _, err := c.TakeAll(ctx, nil); !errors.Is(err, ErrBadArgument) {
		t.Errorf("no requests: %v", err)
	}
	_, err := c.TakeAll(ctx, []Request{{"a", "k", Limit{1, 1}, 1}, {"a", "k", Limit{1, 1}, 1}})
	var e *Error
	if !errors.As(err, &e) || e.Index != 1 || e.Code != "22023" {
		t.Errorf("a pair twice: %v", err)
	}
	if s := c.Stats(); s.Database+s.Local+s.Fallback != 0 {
		t.Errorf("refused arguments made decisions: %+v", s)
	}

	// what only the server knows
	pol, unknown := uniqueName(t), uniqueName(t)
	exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ($1, 1, 5)", pol)
	for i := 0; i < 2; i++ {
		_, err = c.TakePolicy(ctx, unknown, "k", 1)
		if !errors.As(err, &e) || !errors.Is(err, ErrUnknownLimiter) || e.Limiter != unknown {
			t.Errorf("unknown policy: %v", err)
		}
	}
	// 1.2 refuses the explicit form of a policy's limiter (42501) where the
	// server does; rl_refund without EXECUTE is 42501 on every version
	_, serr := db.Exec(ctx, "SELECT rl_take($1, 'k', 1, 5, 1)", pol)
	_, err = c.Take(ctx, pol, "k", Limit{1, 5}, 1)
	if serr != nil && (!errors.As(err, &e) || !errors.Is(err, ErrNotPermitted) || e.Limiter != pol || e.Code != "42501") {
		t.Errorf("the explicit form of a policy's limiter: %v (the server: %v)", err, serr)
	}
	exec1(t, db, "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'go_nopriv') THEN CREATE ROLE go_nopriv LOGIN; END IF; END$$")
	nopriv, nw := newClient(t, conn+" user=go_nopriv", nil)
	_, err = nopriv.Refund(ctx, pol, "k", 1)
	if !errors.As(err, &e) || !errors.Is(err, ErrNotPermitted) || e.Limiter != pol || e.Code != "42501" {
		t.Errorf("rl_refund without EXECUTE: %v", err)
	}
	if d, err := nopriv.TakePolicy(ctx, pol, "k", 1); err != nil || d.Source != SourceDatabase || nw.count() != 0 {
		t.Errorf("after a refusal, no backoff: %+v %v", d, err)
	}
	_, err = c.TakeAllPolicy(ctx, []Request{{Limiter: pol, Key: "k", Cost: 1}, {Limiter: unknown, Key: "k", Cost: 1}})
	if !errors.Is(err, ErrUnknownLimiter) {
		t.Errorf("an unknown policy in TakeAllPolicy: %v", err)
	}
	t.Run("element", func(t *testing.T) {
		if !errors.As(err, &e) || e.Index != 1 || e.Limiter != unknown {
			t.Errorf("an unknown policy in TakeAllPolicy, element 2: %v", err)
		}
	})
	// no backoff: the next call goes to the database
	if d, err := c.TakePolicy(ctx, pol, "k", 1); err != nil || d.Source != SourceDatabase {
		t.Errorf("after bad use: %+v %v, want the database's decision", d, err)
	}
	if s := c.Stats(); s.Fallback != 0 || w.count() != 0 {
		t.Errorf("bad use fell back: %+v, %d warnings", s, w.count())
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// TestFloodRefusedLocally: 10 000 calls on one key at burst 10 make 20
// rl_take calls and 10 000 - 20 local refusals, in both stores, as
// pg_stat_user_functions counts them in a database of their own.
func TestFloodRefusedLocally(t *testing.T) {
	stores(t, func(t *testing.T, conn string) {
		name := strings.ToLower(uniqueName(t))
		exec1(t, sqlConn(t, conn), "CREATE DATABASE "+name)
		conn += " dbname=" + name
		db := sqlConn(t, conn)
		exec1(t, db, "CREATE EXTENSION ratelimit")
		c, _ := newClient(t, conn, nil)
		calls := func() int64 {
			var n int64
			exec1(t, db, "SELECT pg_stat_clear_snapshot()")
			if err := db.QueryRow(context.Background(),
				"SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'rl_take'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		exited(t, sessions(t, db))
		before := calls()
		allowed := 0
		for i := 0; i < 10000; i++ {
			if take(t, c, name, "flood", 1.0/3600, 10, 1).Allowed {
				allowed++
			}
		}
		s := c.Stats()
		if allowed != 10 || s.Database != 20 || s.Local != 9980 {
			t.Errorf("allowed %d, counters %+v: want 10 allowed, 20 database, 9980 local", allowed, s)
		}
		// the server counts what reached it once the sessions have ended
		pids := sessions(t, db)
		if len(pids) == 0 {
			t.Fatal("the client has no session open")
		}
		c.Close()
		exited(t, pids)
		if n := calls() - before; n != 20 {
			t.Errorf("the server ran rl_take %d times, want 20", n)
		}
	})
}

// TestTakeAllOneCall: TakeAll and TakeAllPolicy are one rl_take_all_detail
// call each and peek no bucket with rl_take, as pg_stat_user_functions
// counts them in a database of their own.
func TestTakeAllOneCall(t *testing.T) {
	conn := env(t, "RL_GO_TABLE")
	name := strings.ToLower(uniqueName(t))
	exec1(t, sqlConn(t, conn), "CREATE DATABASE "+name)
	conn += " dbname=" + name
	db := sqlConn(t, conn)
	exec1(t, db, "CREATE EXTENSION ratelimit")
	exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ('detail', 1, 100)")
	c, _ := newClient(t, conn, nil)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.TakeAll(ctx, []Request{{"detail_x", "a", Limit{1, 100}, 1}, {"detail_x", "b", Limit{1, 100}, 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TakeAllPolicy(ctx, []Request{{Limiter: "detail", Key: "a", Cost: 1}, {Limiter: "detail", Key: "b", Cost: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Database != 6 {
		t.Fatalf("%d database decisions, want 6", s.Database)
	}
	pids := sessions(t, db)
	if len(pids) == 0 {
		t.Fatal("the client has no session open")
	}
	c.Close()
	exited(t, pids)
	calls := func() (map[string]int64, int64) {
		rows, err := db.Query(ctx, "SELECT funcname::text, sum(calls)::int8 FROM pg_stat_user_functions "+
			"WHERE funcname IN ('rl_take', 'rl_take_all', 'rl_take_all_detail') GROUP BY funcname")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m, total := map[string]int64{}, int64(0)
		for rows.Next() {
			var f string
			var n int64
			if err := rows.Scan(&f, &n); err != nil {
				t.Fatal(err)
			}
			m[f], total = n, total+n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m, total
	}
	m, _ := calls()
	if len(m) != 1 || m["rl_take_all_detail"] != 6 {
		t.Errorf("the server ran %v, want rl_take_all_detail 6 times and nothing else", m)
	}
}

// TestOutage: the server stopped: every call returns within the deadline,
// decided in memory from the database's last answer, one warning per
// limiter, counted by reason; the last policies read decide, a policy never
// read is refused; the server back, the database decides after the backoff.
func TestOutage(t *testing.T) {
	v := newVictim(t)
	opts := &Options{Deadline: time.Second, Backoff: 500 * time.Millisecond}
	c, w := newClient(t, v.conn, opts)
	db := sqlConn(t, v.conn)
	ctx := context.Background()
	name, pol, never := uniqueName(t), uniqueName(t), uniqueName(t)
	exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ($1, 1.0/3600, 4)", pol)
	shadow := uniqueName(t)
	exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst, shadow) VALUES ($1, 1.0/3600, 1, true)", shadow)
	db.Close(ctx)
	for i := 0; i < 3; i++ {
		if d := take(t, c, name, "k", 1.0/3600, 5, 1); d.Source != SourceDatabase || !d.Allowed {
			t.Fatalf("before the outage: %+v", d)
		}
	}
	if d, err := c.TakePolicy(ctx, pol, "k", 1); err != nil || d.Source != SourceDatabase || d.Remaining != 3 {
		t.Fatalf("policy before the outage: %+v %v", d, err)
	}
	v.stop(t)
	defer v.start(t)
	allowed := 0
	for i := 0; i < 4; i++ {
		var d Decision
		if el := timed(func() { d = take(t, c, name, "k", 1.0/3600, 5, 1) }); el > opts.Backoff {
			t.Errorf("call %d took %v with the server stopped", i, el)
		}
		if d.Source != SourceFallback {
			t.Errorf("call %d: %+v, want a fallback", i, d)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("%d allowed in memory, want the 2 the database had left", allowed)
	}
	for i, want := range []bool{true, true, true, false} {
		d, err := c.TakePolicy(ctx, pol, "k", 1)
		if err != nil || d.Source != SourceFallback || d.Allowed != want {
			t.Errorf("policy call %d in the outage: %+v %v, want allowed %v", i, d, err, want)
		}
	}
	d, err := c.TakePolicy(ctx, never, "k", 1)
	if err != nil || d.Allowed || d.Source != SourceFallback {
		t.Errorf("a policy never read: %+v %v, want refused", d, err)
	}
	// a shadow policy decides and stores in memory, and never denies
	for i, want := range []int{0, 0, 0} {
		d, err := c.TakePolicy(ctx, shadow, "k", 1)
		if err != nil || !d.Allowed || d.Source != SourceFallback || d.Remaining != want || d.RetryAfter != 0 {
			t.Errorf("shadow call %d in the outage: %+v %v", i, d, err)
		}
	}
	s := c.Stats()
	if s.FallbackError == 0 || s.NoPolicy != 1 || s.Fallback != s.FallbackError+s.FallbackTimeout {
		t.Errorf("counters %+v", s)
	}
	if n := w.count(); n != 4 {
		t.Errorf("%d warnings, want one per limiter (4): %v", n, w.lines)
	} else if !contains(w.lines[0], fmt.Sprintf("limiter %q is decided in memory at the same limit: the database failed (", name)) {
		t.Errorf("warning: %s", w.lines[0])
	}
	v.start(t)
	backToDatabase(t, c, 0, func() Decision { return take(t, c, name, "other", 1.0/3600, 5, 1) })
}

// TestStall: every process of the server stopped by SIGSTOP (its sockets
// accept and never answer): each call returns within the deadline plus a
// small margin and decides in memory (reason timeout), a client that must
// connect too; one attempt per backoff interval; after SIGCONT, the
// database again after the backoff.
func TestStall(t *testing.T) {
	v := newVictim(t)
	opts := &Options{Deadline: 400 * time.Millisecond, Backoff: 400 * time.Millisecond}
	c, _ := newClient(t, v.conn, opts)
	fresh, _ := newClient(t, v.conn, opts)
	name := uniqueName(t)
	for i := 0; i < 2; i++ {
		take(t, c, name, "k", 1.0/3600, 5, 1)
	}
	resume := v.stall(t)
	// what a loaded machine (and the race detector) adds to a call: below
	// one more deadline, it still tells one deadline from two, and a call
	// that waited for the stalled server would wait until SIGCONT
	margin := 350 * time.Millisecond
	// the first failure starts the backoff; from then on, one attempt per
	// interval across the goroutines
	if el := timed(func() { take(t, c, name, "k", 1.0/3600, 5, 1) }); el > opts.Deadline+margin {
		t.Errorf("the first call after the stall took %v", el)
	}
	var worst time.Duration
	var slow, allowed int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := time.Now()
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 1500*time.Millisecond {
				var d Decision
				el := timed(func() { d, _ = c.Take(context.Background(), name, "k", Limit{1.0 / 3600, 5}, 1) })
				mu.Lock()
				if el > worst {
					worst = el
				}
				mu.Unlock()
				if el > opts.Deadline/2 {
					atomic.AddInt64(&slow, 1)
				}
				if d.Source != SourceFallback {
					t.Errorf("a stalled server decided: %+v", d)
					return
				}
				if d.Allowed {
					atomic.AddInt64(&allowed, 1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	var d Decision
	if el := timed(func() { d = take(t, fresh, name, "k2", 1.0/3600, 5, 1) }); el > opts.Deadline+margin || d.Source != SourceFallback {
		t.Errorf("connecting to the stalled server: %v, %+v", el, d)
	}
	if worst > opts.Deadline+margin {
		t.Errorf("a call took %v with the server stalled (deadline %v)", worst, opts.Deadline)
	}
	s := c.Stats()
	c.mu.Lock()
	attempts := c.attempts - 3
	c.mu.Unlock()
	// 1.5 s, a backoff of 0.4 s after each attempt of 0.4 s: at most 3
	// attempts, one at a time across the goroutines
	if attempts < 1 || attempts > 3 || s.FallbackTimeout != s.Fallback || allowed != 2 {
		t.Errorf("%d attempts on the database, counters %+v, %d allowed in memory (want the 2 left)", attempts, s, allowed)
	}
	resume()
	backToDatabase(t, c, margin, func() Decision { return take(t, c, name, "after", 1.0/3600, 5, 1) })
	t.Logf("worst call %v; %d attempts, %d calls slower than half the deadline", worst, attempts, slow)
}

// TestGoroutines: 8 goroutines share one burst of 100 exactly, through the
// database; then, the database unreachable and memory full, only the keys
// that have buckets are allowed, each its burst.
func TestGoroutines(t *testing.T) {
	conn := env(t, "RL_GO_TABLE")
	c, _ := newClient(t, conn, nil)
	name := uniqueName(t)
	var allowed int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				d, err := c.Take(context.Background(), name, "shared", Limit{1.0 / 3600, 100}, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					atomic.AddInt64(&allowed, 1)
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 100 {
		t.Errorf("%d allowed across goroutines, want 100", allowed)
	}

	down, _ := newClient(t, unreachable(), &Options{MaxKeys: 4})
	allowed = 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				d, _ := down.Take(context.Background(), name, fmt.Sprint("k", (g+i)%10), Limit{1.0 / 3600, 3}, 1)
				if d.Allowed {
					atomic.AddInt64(&allowed, 1)
				}
			}
		}(g)
	}
	wg.Wait()
	if s := down.Stats(); allowed != 12 || s.Keys != 4 || s.NoRoom == 0 {
		t.Errorf("%d allowed with 4 keys of burst 3 in memory (want 12), counters %+v", allowed, s)
	}
}

// TestBoundedMemory: the key bound.  With the database up, 40 keys through 8
// buckets, every decision the database's; down, only full buckets make room,
// a key without room is refused until one is full again, never allowed.
func TestBoundedMemory(t *testing.T) {
	conn := env(t, "RL_GO_TABLE")
	c, _ := newClient(t, conn, &Options{MaxKeys: 8})
	name := uniqueName(t)
	for i := 0; i < 40; i++ {
		if d := take(t, c, name, fmt.Sprint("k", i), 1.0/3600, 2, 1); d.Source != SourceDatabase || !d.Allowed {
			t.Errorf("key %d: %+v", i, d)
		}
	}
	if s := c.Stats(); s.Keys != 8 || s.Evictions != 32 {
		t.Errorf("counters %+v: want 8 keys, 32 evictions", s)
	}

	down, _ := newClient(t, unreachable(), &Options{MaxKeys: 4})
	// one-minute buckets, full again when the test moves the client's clock
	for i := 0; i < 4; i++ {
		take(t, down, name, fmt.Sprint("fast", i), 1.0/60, 1, 1)
	}
	d := take(t, down, name, "late", 1.0/60, 1, 1)
	if d.Allowed || d.Source != SourceFallback || d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
		t.Errorf("a key without room: %+v, want refused until a bucket is full", d)
	}
	advance(down, 30*time.Second)
	if d := take(t, down, name, "late", 1.0/60, 1, 1); d.Allowed {
		t.Errorf("half a minute later, no bucket is full yet: %+v", d)
	}
	advance(down, 30*time.Second)
	if d := take(t, down, name, "late", 1.0/60, 1, 1); !d.Allowed {
		t.Errorf("a full bucket makes room: %+v", d)
	}
	if s := down.Stats(); s.NoRoom != 2 || s.Keys != 4 {
		t.Errorf("counters %+v", s)
	}
	total := 0
	hammered, _ := newClient(t, unreachable(), &Options{MaxKeys: 4})
	for round := 0; round < 50; round++ {
		for k := 0; k < 10; k++ {
			if take(t, hammered, name, fmt.Sprint("h", k), 1.0/3600, 2, 1).Allowed {
				total++
			}
		}
	}
	if total != 8 {
		t.Errorf("10 keys at MaxKeys 4, burst 2: %d allowed, want 8", total)
	}
}

// TestWarnings: 2 000 limiters fall back, three calls each: 1 024 named
// once, one summary line.
func TestWarnings(t *testing.T) {
	c, w := newClient(t, unreachable(), &Options{Backoff: time.Hour})
	for i := 0; i < 2000; i++ {
		for j := 0; j < 3; j++ {
			take(t, c, fmt.Sprint("warn", i), "k", 1, 1, 1)
		}
	}
	named := map[string]int{}
	summary := 0
	for _, l := range w.limiters {
		if l == "" {
			summary++
		} else {
			named[l]++
		}
	}
	twice := 0
	for _, n := range named {
		if n > 1 {
			twice++
		}
	}
	if len(named) != 1024 || summary != 1 || twice != 0 || len(w.lines) != 1025 {
		t.Errorf("%d named (%d twice), %d summaries, %d in all; want 1024, 0, 1, 1025", len(named), twice, summary, len(w.lines))
	}
}

// TestRefund: a refund gives the server's bucket and the client's back a
// request, in both stores; during an outage, the in-memory bucket.
func TestRefund(t *testing.T) {
	stores(t, func(t *testing.T, conn string) {
		c, _ := newClient(t, conn, nil)
		ctx := context.Background()
		name := uniqueName(t)
		for i := 0; i < 2; i++ {
			take(t, c, name, "k", 1.0/3600, 2, 1)
		}
		if d := take(t, c, name, "k", 1.0/3600, 2, 1); d.Allowed {
			t.Fatalf("over the burst: %+v", d)
		}
		ok, err := c.Refund(ctx, name, "k", 1)
		if err != nil || !ok {
			t.Fatalf("Refund: %v %v", ok, err)
		}
		if d := take(t, c, name, "k", 1.0/3600, 2, 1); !d.Allowed || d.Source != SourceDatabase || d.Remaining != 0 {
			t.Errorf("after a refund: %+v", d)
		}
		// the pre-check (twice the burst) got its request back too: the
		// next call still reaches the database
		if d := take(t, c, name, "k", 1.0/3600, 2, 1); d.Allowed || d.Source != SourceDatabase {
			t.Errorf("the pre-check after a refund: %+v", d)
		}
		if _, err := c.Refund(ctx, name, "k", -1); !errors.Is(err, ErrBadArgument) {
			t.Errorf("a negative refund: %v", err)
		}
	})
	down, _ := newClient(t, unreachable(), nil)
	take(t, down, "r", "k", 1.0/3600, 1, 1)
	if d := take(t, down, "r", "k", 1.0/3600, 1, 1); d.Allowed {
		t.Fatalf("over the burst in memory: %+v", d)
	}
	if ok, err := down.Refund(context.Background(), "r", "k", 1); !ok || err != nil {
		t.Errorf("a refund in memory: %v %v", ok, err)
	}
	if d := take(t, down, "r", "k", 1.0/3600, 1, 1); !d.Allowed || d.Source != SourceFallback {
		t.Errorf("after a refund in memory: %+v", d)
	}
}

// TestPgBouncer: through PgBouncer in transaction mode (2 server
// connections for 8 of the client's), 8 goroutines share a burst exactly,
// in every form.
func TestPgBouncer(t *testing.T) {
	conn := env(t, "RL_GO_PGBOUNCER")
	c, _ := newClient(t, conn, &Options{Deadline: 5 * time.Second, PoolSize: 8})
	db := sqlConn(t, env(t, "RL_GO_TABLE"))
	name, pol := uniqueName(t), uniqueName(t)
	exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ($1, 1.0/3600, 200)", pol)
	var allowed, errs int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				var d Decision
				var err error
				switch i % 4 {
				case 0:
					d, err = c.Take(context.Background(), name, "k", Limit{1.0 / 3600, 200}, 1)
				case 1:
					d, err = c.TakePolicy(context.Background(), pol, "k", 1)
				case 2:
					d, err = c.TakeAll(context.Background(), []Request{{name, "k", Limit{1.0 / 3600, 200}, 1}})
				case 3:
					d, err = c.TakeAllPolicy(context.Background(), []Request{{Limiter: pol, Key: "k", Cost: 1}})
				}
				if err != nil || d.Source != SourceDatabase {
					atomic.AddInt64(&errs, 1)
					t.Errorf("through PgBouncer: %+v %v", d, err)
				}
				if d.Allowed {
					atomic.AddInt64(&allowed, 1)
				}
			}
		}(g)
	}
	wg.Wait()
	if allowed != 400 || errs != 0 {
		t.Errorf("%d allowed (want 200 + 200), %d not decided by the database", allowed, errs)
	}
}

// TestRestart: the server restarted between two calls: the pooled
// connections it closed are replaced within the same deadline, and the
// first call after the restart is the database's.
func TestRestart(t *testing.T) {
	v := newVictim(t)
	c, _ := newClient(t, v.conn, &Options{Deadline: 2 * time.Second})
	name := uniqueName(t)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ { // several pooled connections
		wg.Add(1)
		go func() { defer wg.Done(); take(t, c, name, "k", 1.0/3600, 50, 1) }()
	}
	wg.Wait()
	v.stop(t)
	v.start(t)
	if d := take(t, c, name, "k", 1.0/3600, 50, 1); d.Source != SourceDatabase || d.Remaining != 46 {
		t.Errorf("the first call after a restart: %+v", d)
	}
	if s := c.Stats(); s.Fallback != 0 {
		t.Errorf("counters %+v: no fallback expected", s)
	}
}

// TestPolicyRefresh: a policy change reaches the pre-check only after
// PolicyRefresh, and the call that reads the policies again is not
// pre-checked; the database decides by the new policy at once.
func TestPolicyRefresh(t *testing.T) {
	stores(t, func(t *testing.T, conn string) {
		// PolicyRefresh passes on the client's clock: however slow the
		// calls within it, none reads the policies again
		c, _ := newClient(t, conn, &Options{PolicyRefresh: time.Minute})
		db := sqlConn(t, conn)
		ctx := context.Background()
		pol := uniqueName(t)
		exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ($1, 1.0/3600, 2)", pol)
		var got []string
		for i := 0; i < 6; i++ {
			d, err := c.TakePolicy(ctx, pol, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%v/%s", d.Allowed, d.Source))
		}
		// the first call reads the policies: it does not spend the pre-check
		want := "[true/database true/database false/database false/database false/database false/local]"
		if fmt.Sprint(got) != want {
			t.Errorf("burst 2: %v, want %s", got, want)
		}
		exec1(t, db, "UPDATE rl_policies SET burst = 10 WHERE limiter = $1", pol)
		advance(c, 30*time.Second)
		if d, _ := c.TakePolicy(ctx, pol, "k", 1); d.Source != SourceLocal {
			t.Errorf("within PolicyRefresh, the old policy pre-checks: %+v", d)
		}
		advance(c, 30*time.Second)
		if d, _ := c.TakePolicy(ctx, pol, "k", 1); !d.Allowed || d.Source != SourceDatabase || d.Remaining != 7 {
			t.Errorf("after PolicyRefresh: %+v, want the database by burst 10", d)
		}
		if s := c.Stats(); s.PolicyReads != 2 {
			t.Errorf("%d reads of rl_policies, want 2", s.PolicyReads)
		}
		// a policy made since the last read: the database decides it
		// without a pre-check, and the next policy call reads them again
		late := uniqueName(t)
		exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ($1, 1.0/3600, 3)", late)
		if d, err := c.TakePolicy(ctx, late, "k", 1); err != nil || d.Source != SourceDatabase || d.Remaining != 2 {
			t.Errorf("a policy made since the last read: %+v %v", d, err)
		}
		c.TakePolicy(ctx, late, "k", 1)
		if s := c.Stats(); s.PolicyReads != 3 {
			t.Errorf("%d reads of rl_policies, want 3: a missing limiter reads them again", s.PolicyReads)
		}
	})
}

// TestCallerContext: a caller whose own context ends first (before the
// call, or while the server stalls) gets its context's error, wrapped, and
// no decision; the database is not put in its backoff for it, and the
// client's own deadline still gives a decision in memory.
func TestCallerContext(t *testing.T) {
	v := newVictim(t)
	c, _ := newClient(t, v.conn, nil)
	name := uniqueName(t)
	take(t, c, name, "k", 1.0/3600, 5, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := c.Take(ctx, name, "k", Limit{1.0 / 3600, 5}, 1)
	if !errors.Is(err, context.Canceled) || d.Allowed {
		t.Errorf("an ended context: %+v %v, want context.Canceled", d, err)
	}
	if _, err := c.Refund(ctx, name, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Refund with an ended context: %v, want context.Canceled", err)
	}
	if d := take(t, c, name, "k", 1.0/3600, 5, 1); d.Source != SourceDatabase {
		t.Errorf("the next call: %+v, want the database (no backoff)", d)
	}
	resume := v.stall(t)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var el time.Duration
	// far below the client's deadline of 5 s, which would end the call if
	// the caller's context did not: headroom for a loaded machine that still
	// proves the context decides
	if el = timed(func() { d, err = c.Take(ctx, name, "k", Limit{1.0 / 3600, 5}, 1) }); !errors.Is(err, context.DeadlineExceeded) ||
		d.Allowed || el > time.Second {
		t.Errorf("a context of 50 ms, the server stalled: %+v %v after %v, want context.DeadlineExceeded", d, err, el)
	}
	// the client's own deadline: a decision in memory, no error
	quick, _ := newClient(t, v.conn, &Options{Deadline: 100 * time.Millisecond})
	if d, err := quick.Take(context.Background(), name, "q", Limit{1.0 / 3600, 5}, 1); err != nil || d.Source != SourceFallback {
		t.Errorf("the client's deadline, the server stalled: %+v %v, want a fallback", d, err)
	}
	resume()
	if d := take(t, c, name, "k", 1.0/3600, 5, 1); d.Source != SourceDatabase {
		t.Errorf("after SIGCONT: %+v, want the database (no backoff)", d)
	}
}
