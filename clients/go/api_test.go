package ratelimit

import (
	"context"
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLimits: the constructors make rl_take's rate per second and burst.
func TestLimits(t *testing.T) {
	for _, c := range []struct {
		got, want Limit
	}{
		{PerSecond(5), Limit{5, 5}},
		{PerMinute(6), Limit{0.1, 6}},
		{PerHour(36), Limit{0.01, 36}},
		{Every(15*time.Minute, 10), Limit{10.0 / 900, 10}},
		{PerMinute(6).WithBurst(2), Limit{0.1, 2}},
	} {
		if math.Abs(c.got.Rate-c.want.Rate) > 1e-12 || c.got.Burst != c.want.Burst {
			t.Errorf("got %+v, want %+v", c.got, c.want)
		}
	}
	c, err := New("host=/nonexistent", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Take(context.Background(), "l", "k", Every(0, 1), 1); !errors.Is(err, ErrBadArgument) {
		t.Errorf("a period of 0: %v, want ErrBadArgument", err)
	}
}

// TestServerErrorInChain: a call the server refuses keeps the server's
// *pgconn.PgError in the chain beside the kind of bad use.
func TestServerErrorInChain(t *testing.T) {
	c, _ := newClient(t, env(t, "RL_GO_TABLE"), nil)
	_, err := c.TakePolicy(context.Background(), uniqueName(t), "k", 1)
	var pgErr *pgconn.PgError
	if !errors.Is(err, ErrUnknownLimiter) || !errors.As(err, &pgErr) || pgErr.Code != "42704" {
		t.Errorf("an unknown policy: %v (%T), want ErrUnknownLimiter and the server's 42704", err, err)
	}
	// the client's own checks have no server error
	_, err = c.Take(context.Background(), "", "k", PerMinute(1), 1)
	if !errors.Is(err, ErrBadArgument) || errors.As(err, &pgErr) {
		t.Errorf("an empty limiter: %v, want ErrBadArgument without a server error", err)
	}
}

// TestNewWithConfig: the client connects through the config it is given
// (its DialFunc here), and neither New nor NewWithConfig connects.
func TestNewWithConfig(t *testing.T) {
	config, err := pgconn.ParseConfig(env(t, "RL_GO_TABLE"))
	if err != nil {
		t.Fatal(err)
	}
	dials := 0
	dial := config.DialFunc
	config.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		return dial(ctx, network, addr)
	}
	c, err := NewWithConfig(config, &Options{Deadline: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if dials != 0 {
		t.Errorf("NewWithConfig dialled %d times", dials)
	}
	if d, err := c.Take(context.Background(), uniqueName(t), "k", PerMinute(1), 1); err != nil || d.Source != SourceDatabase || dials != 1 {
		t.Errorf("%+v %v after %d dials, want the database's decision through the DialFunc", d, err, dials)
	}
	if _, err := NewWithConfig(nil, nil); err == nil {
		t.Errorf("a nil config: no error")
	}
}
