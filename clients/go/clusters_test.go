package ratelimit

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The clusters test/clients/go.pl starts: RL_GO_TABLE and RL_GO_MEMORY (one
// per store), RL_GO_VICTIM (stopped, stalled and restarted by the tests; its
// data directory RL_GO_VICTIM_DATA, the server's programs in RL_GO_BINDIR)
// and RL_GO_PGBOUNCER (PgBouncer in transaction mode before RL_GO_TABLE).
func env(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set (test/clients/go.pl sets it)", name)
	}
	return v
}

// RL_GO_SQL_EDITION=1: RL_GO_TABLE's server has the SQL edition (managed/)
// instead of the C extension, and is the only cluster.
var sqlEdition = os.Getenv("RL_GO_SQL_EDITION") == "1"

// needsExtension skips a test that reads a part of the C extension the SQL
// edition lacks.
func needsExtension(t *testing.T, what string) {
	if sqlEdition {
		t.Skipf("the SQL edition has no %s", what)
	}
}

// stores runs f once per store (the table store alone in the SQL edition).
func stores(t *testing.T, f func(t *testing.T, conn string)) {
	names := []string{"table", "memory"}
	if sqlEdition {
		names = names[:1]
	}
	for _, s := range names {
		conn := env(t, "RL_GO_"+strings.ToUpper(s))
		t.Run(s, func(t *testing.T) { f(t, conn) })
	}
}

var limiterSeq struct {
	sync.Mutex
	n int
}

// uniqueName is a limiter name no other test uses.
func uniqueName(t *testing.T) string {
	limiterSeq.Lock()
	defer limiterSeq.Unlock()
	limiterSeq.n++
	return fmt.Sprintf("go_%s_%d_%d", strings.NewReplacer("/", "_").Replace(t.Name()), os.Getpid(), limiterSeq.n)
}

// warnings collects what a client warns.
type warnings struct {
	sync.Mutex
	lines    []string
	limiters []string
}

func (w *warnings) warn(limiter, message string) {
	w.Lock()
	defer w.Unlock()
	w.lines = append(w.lines, message)
	w.limiters = append(w.limiters, limiter)
}

func (w *warnings) count() int {
	w.Lock()
	defer w.Unlock()
	return len(w.lines)
}

func newClient(t *testing.T, conn string, opts *Options) (*Client, *warnings) {
	var o Options
	if opts != nil {
		o = *opts
	}
	// a loaded machine must not turn the database's decisions into
	// fallbacks where a test counts them: the tests of the deadline set
	// their own
	if o.Deadline == 0 {
		o.Deadline = 5 * time.Second
	}
	w := &warnings{}
	if o.Warn == nil {
		o.Warn = w.warn
	}
	c, err := New(conn, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c, w
}

// sqlConn is a plain connection for what the tests ask the server.
func sqlConn(t *testing.T, conn string) *pgx.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func exec1(t *testing.T, c *pgx.Conn, sql string, args ...interface{}) {
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// take calls c.Take and fails the test on an error.
func take(t *testing.T, c *Client, limiter, key string, rate float64, burst, cost int) Decision {
	d, err := c.Take(context.Background(), limiter, key, Limit{rate, burst}, cost)
	if err != nil {
		t.Fatalf("Take(%s, %s): %v", limiter, key, err)
	}
	return d
}

// near: d is within tolerance seconds of want seconds (Never of +Inf only).
func near(d time.Duration, want, tolerance float64) bool {
	a := d.Seconds()
	if d == Never {
		a = math.Inf(1)
	}
	if math.IsInf(a, 1) || math.IsInf(want, 1) {
		return a == want
	}
	return math.Abs(a-want) <= tolerance
}

// victim controls the cluster the outage tests stop and stall.
type victim struct {
	conn, data, bindir string
	stopped            bool
}

func newVictim(t *testing.T) *victim {
	return &victim{conn: env(t, "RL_GO_VICTIM"), data: env(t, "RL_GO_VICTIM_DATA"),
		bindir: env(t, "RL_GO_BINDIR")}
}

func (v *victim) pgctl(t *testing.T, args ...string) {
	cmd := exec.Command(filepath.Join(v.bindir, "pg_ctl"), append([]string{"-D", v.data, "-w"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl %v: %v\n%s", args, err, out)
	}
}

func (v *victim) stop(t *testing.T) {
	v.pgctl(t, "-m", "fast", "stop")
	v.stopped = true
}

// start starts the victim again if it is stopped.
func (v *victim) start(t *testing.T) {
	if v.stopped {
		v.pgctl(t, "-l", filepath.Join(v.data, "..", "go_restart.log"), "start")
		v.stopped = false
	}
}

// pids answers the postmaster of the victim and its children.
func (v *victim) pids(t *testing.T) []int {
	data, err := os.ReadFile(filepath.Join(v.data, "postmaster.pid"))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	pm, err := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	pids := []int{pm}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pm) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stall stops every process of the victim with SIGSTOP: its sockets accept
// bytes and never answer.  The returned func (also run at cleanup) sends
// SIGCONT.
func (v *victim) stall(t *testing.T) func() {
	pids := v.pids(t)
	var once sync.Once
	resume := func() {
		once.Do(func() {
			for _, p := range pids {
				syscall.Kill(p, syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(resume)
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			resume()
			t.Fatalf("SIGSTOP %d: %v", p, err)
		}
	}
	return resume
}

// advance moves c's clock forward by d: its intervals and buckets pass when
// the test says so, never because the machine is slow.
func advance(c *Client, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start = c.start.Add(-d)
}

// sessions answers the pids of the other backends of db's database.
func sessions(t *testing.T, db *pgx.Conn) []int {
	rows, err := db.Query(context.Background(),
		"SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pids
}

// exited waits until the backends pids have exited: a session's counters
// reach the statistics views when its backend ends, after it has left
// pg_stat_activity, so the processes themselves are waited for.
func exited(t *testing.T, pids []int) {
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the backend %d has not exited within 20 s", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// backToDatabase calls take until c's database decides again, for 10 s at
// most, and fails t unless it did within a backoff interval and a deadline
// as configured (plus margin) of each probe, a call that went to the
// database: a loaded machine may take longer than a deadline to connect to
// the server back, and then the next probe comes a backoff interval later.
func backToDatabase(t *testing.T, c *Client, margin time.Duration, take func() Decision) {
	t.Helper()
	c.mu.Lock()
	before := c.attempts
	c.mu.Unlock()
	start := time.Now()
	d := take()
	for d.Source != SourceDatabase && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
		d = take()
	}
	el := time.Since(start)
	c.mu.Lock()
	probes := c.attempts - before
	c.mu.Unlock()
	if bound := time.Duration(probes) * (c.opts.Backoff + c.opts.Deadline + margin); d.Source != SourceDatabase || el > bound {
		t.Errorf("back to the database: %+v after %v and %d probes, want the database within %v", d, el, probes, bound)
	}
}

// timed runs f and answers how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// unreachable is a connection string on which nothing listens.
func unreachable() string {
	return "host=127.0.0.1 port=1 dbname=postgres user=nobody connect_timeout=5"
}
