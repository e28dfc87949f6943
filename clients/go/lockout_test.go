package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestLockoutKept: a lock the database started is kept by the pre-check
// without a round trip and, during an outage, by the fallback, with the
// lock's remainder as RetryAfter.
func TestLockoutKept(t *testing.T) {
	v := newVictim(t)
	c, _ := newClient(t, v.conn, &Options{Backoff: 60e9})
	db := sqlConn(t, v.conn)
	ctx := context.Background()
	pol := uniqueName(t)
	exec1(t, db, "INSERT INTO rl_policies (limiter, rate, burst, lockout) VALUES ($1, 1.0/3600, 2, interval '600 seconds')", pol)
	db.Close(ctx)
	for i := 0; i < 2; i++ {
		if d, err := c.TakePolicy(ctx, pol, "ada", 1); err != nil || !d.Allowed || d.Source != SourceDatabase {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	if d, err := c.TakePolicy(ctx, pol, "ada", 1); err != nil || d.Allowed || !near(d.RetryAfter, 600, 1) {
		t.Fatalf("the 3rd, a lockout of 600 s by the database: %+v %v", d, err)
	}
	if d, err := c.TakePolicy(ctx, pol, "ada", 1); err != nil || d.Allowed || d.Source != SourceLocal ||
		d.RetryAfter > 600*time.Second || d.RetryAfter < 595*time.Second {
		t.Fatalf("the pre-check keeps the lock: %+v %v", d, err)
	}
	v.stop(t)
	defer v.start(t)
	// a call of another key finds the database down: its backoff starts
	if d, err := c.TakePolicy(ctx, pol, "bob", 1); err != nil || !d.Allowed || d.Source != SourceFallback {
		t.Fatalf("bob in memory: %+v %v", d, err)
	}
	// the database's lock's remainder, not a lockout of the fallback's own
	if d, err := c.TakePolicy(ctx, pol, "ada", 1); err != nil || d.Allowed || d.Source != SourceFallback ||
		d.RetryAfter >= 599990*time.Millisecond || d.RetryAfter < 595*time.Second {
		t.Fatalf("the fallback keeps the lock: %+v %v", d, err)
	}
}

// TestPolicies12: a database at extension 1.2 has no lockout columns; its
// policies are read by 1.2's query.
func TestPolicies12(t *testing.T) {
	conn := env(t, "RL_GO_TABLE")
	db := sqlConn(t, conn)
	ctx := context.Background()
	exec1(t, db, "DROP DATABASE IF EXISTS go_old")
	exec1(t, db, "CREATE DATABASE go_old")
	db.Close(ctx)
	old := sqlConn(t, conn+" dbname=go_old")
	exec1(t, old, "CREATE EXTENSION ratelimit VERSION '1.2'")
	exec1(t, old, "INSERT INTO rl_policies (limiter, rate, burst) VALUES ('old', 1, 5)")
	old.Close(ctx)
	c, _ := newClient(t, conn+" dbname=go_old", nil)
	d, err := c.TakePolicy(ctx, "old", "k", 1)
	if err != nil || !d.Allowed || d.Source != SourceDatabase || d.Remaining != 4 {
		t.Fatalf("a 1.2 database by policy: %+v %v", d, err)
	}
	if s := c.Stats(); s.PolicyReads != 1 {
		t.Fatalf("its policies were read %d times, want 1", s.PolicyReads)
	}
}
