package ratelimit

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// holdingProxy forwards TCP on 127.0.0.1 to a server's Unix socket; while
// held, it forwards nothing (a network that holds every packet), and it
// swallows every cancel request, never answering it.
type holdingProxy struct {
	ln       net.Listener
	target   string
	held     int32
	cancels  int32
	accepted int32
}

func startProxy(t *testing.T, conn string) *holdingProxy {
	host, port := "", ""
	for _, f := range strings.Fields(conn) {
		if strings.HasPrefix(f, "host=") {
			host = f[5:]
		}
		if strings.HasPrefix(f, "port=") {
			port = f[5:]
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{ln: ln, target: filepath.Join(host, ".s.PGSQL."+port)}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *holdingProxy) addr() string {
	a := p.ln.Addr().(*net.TCPAddr)
	return fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres sslmode=disable", a.Port)
}

func (p *holdingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		atomic.AddInt32(&p.accepted, 1)
		go p.handle(c)
	}
}

func (p *holdingProxy) handle(c net.Conn) {
	first := make([]byte, 8)
	if _, err := io.ReadFull(c, first); err != nil {
		c.Close()
		return
	}
	if binary.BigEndian.Uint32(first[4:]) == 80877102 {
		// a cancel request: read it and never answer
		atomic.AddInt32(&p.cancels, 1)
		io.Copy(io.Discard, c)
		return
	}
	s, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	s.Write(first)
	go p.pipe(s, c)
	p.pipe(c, s)
}

func (p *holdingProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32768)
	for {
		n, err := src.Read(buf)
		for atomic.LoadInt32(&p.held) == 1 {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestLostCancel: a network that holds every packet and swallows the cancel
// request: the call returns within the deadline, its connection (the only
// one of the pool) does not wait for the cancel, the decisions are the
// database's again within a backoff and a deadline of the network's
// return, and Close returns while the cancel is still lost.
func TestLostCancel(t *testing.T) {
	p := startProxy(t, env(t, "RL_GO_TABLE"))
	opts := &Options{Deadline: 250 * time.Millisecond, Backoff: 300 * time.Millisecond, PoolSize: 1}
	c, _ := newClient(t, p.addr(), opts)
	name := uniqueName(t)
	if d := take(t, c, name, "k", 1.0/3600, 5, 1); d.Source != SourceDatabase {
		t.Fatalf("through the proxy: %+v", d)
	}
	atomic.StoreInt32(&p.held, 1)
	var d Decision
	if el := timed(func() { d = take(t, c, name, "k", 1.0/3600, 5, 1) }); el > opts.Deadline+200*time.Millisecond ||
		d.Source != SourceFallback {
		t.Errorf("the network holding packets: %v, %+v", el, d)
	}
	time.Sleep(100 * time.Millisecond)
	atomic.StoreInt32(&p.held, 0)
	backToDatabase(t, c, 200*time.Millisecond, func() Decision { return take(t, c, name, "k", 1.0/3600, 5, 1) })
	if atomic.LoadInt32(&p.cancels) != 1 {
		t.Errorf("%d cancel requests reached the proxy, want 1 (swallowed)", p.cancels)
	}
	if el := timed(c.Close); el > time.Second {
		t.Errorf("Close took %v with a cancel lost", el)
	}
}
