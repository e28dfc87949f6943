// The client's connections: at most PoolSize, each used by one decision at
// a time.  A small pool of its own rather than pgxpool, for one reason:
// pgconn cancels a timed-out query and then closes its socket on a
// goroutine of its own, waiting up to 15 s for the server to acknowledge
// the cancel, and pgxpool v4 keeps the connection's place in the pool until
// that goroutine ends; where the cancel request is lost (a proxy or network
// that swallows it), a place would be blocked for 15 s.  Here a closed
// connection gives its place back at once.

package ratelimit

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

type connPool struct {
	config *pgconn.Config
	places chan struct{} // one per connection, idle or in use

	mu     sync.Mutex
	idle   []*pgconn.PgConn
	closed bool // by Client.Close: a released connection is closed
}

func newConnPool(config *pgconn.Config, size int) *connPool {
	return &connPool{config: config, places: make(chan struct{}, size)}
}

// acquire answers a connection, reused or new, within ctx; busy when no
// place was free before ctx ended (load, not a failure of the database).
func (p *connPool) acquire(ctx context.Context) (conn *pgconn.PgConn, reused, busy bool, err error) {
	select {
	case p.places <- struct{}{}:
	case <-ctx.Done():
		return nil, false, true, ctx.Err()
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		conn = p.idle[n-1]
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if conn != nil {
		return conn, true, false, nil
	}
	conn, err = pgconn.ConnectConfig(ctx, p.config)
	if err != nil {
		<-p.places
		return nil, false, false, err
	}
	return conn, false, false, nil
}

// release gives the place back, and the connection too when it is idle and
// open; a closed one is forgotten (pgconn finishes closing it by itself).
func (p *connPool) release(conn *pgconn.PgConn) {
	keep := !conn.IsClosed() && !conn.IsBusy() && conn.TxStatus() == 'I'
	p.mu.Lock()
	keep = keep && !p.closed
	if keep {
		p.idle = append(p.idle, conn)
	}
	p.mu.Unlock()
	if !keep && !conn.IsClosed() {
		closeNow(conn)
	}
	<-p.places
}

// close closes the idle connections, and each in use when it is released.
func (p *connPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.dropIdle()
}

// dropIdle closes the idle connections: they lead to the same server as one
// found dead, and a stale one would fail a later attempt.
func (p *connPool) dropIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		closeNow(c)
	}
}

// closeNow closes without waiting for the network.
func closeNow(conn *pgconn.PgConn) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	conn.Close(ctx)
}
