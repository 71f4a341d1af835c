package e2e

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
)

// cutProxy forwards TCP connections to a target until cut: then the
// connections open at that moment stop forwarding in both directions
// without closing (what is sent is read and dropped, as a network that
// loses every packet would, past the kernel's acknowledgements). Later
// connections are forwarded as before.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*proxied
	wg     sync.WaitGroup
}

type proxied struct {
	a, b net.Conn
	cut  atomic.Bool
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept() // owned: stopped and awaited in Cleanup
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.a.Close()
			_ = c.b.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = a.Close()
			continue
		}
		c := &proxied{a: a, b: b}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go c.pipe(&p.wg, b, a) // owned: ends when the proxy closes the conns
		go c.pipe(&p.wg, a, b) // owned: likewise
	}
}

// pipe copies src to dst until either fails; once cut, it reads and drops,
// and passes no close on.
func (c *proxied) pipe(wg *sync.WaitGroup, dst, src net.Conn) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			if !c.cut.Load() { // a cut passes no close either
				_ = dst.Close()
			}
			return
		}
		if c.cut.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			_ = src.Close()
			return
		}
	}
}

// cut stops the connections open now.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.cut.Store(true)
	}
}

// An app whose connection to spoold crosses a network notices a cut (no
// packet passes, nothing is closed) within the SDK's keepalive bound,
// KeepaliveTime + KeepaliveTimeout, and its Subscribe reconnects; its
// publishes go through the new connection. (Before the SDK set keepalive
// parameters it noticed nothing: the stream waited on the dead connection
// for as long as TCP kept it, with no data unacknowledged, indefinitely.)
func TestSDKNoticesACutConnectionWithinItsKeepalive(t *testing.T) {
	n := startNode(t, `
topics:
  - name: orders
    partitions: 1
subscriptions:
  - topic: orders
    group: readers
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proxy := startCutProxy(t, n.app)
	c, err := spool.Dial(ctx, proxy.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stats := &spool.Stats{}
	subCtx, stop := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() { // owned: stopped and awaited below
		subDone <- c.Subscribe(subCtx, "readers", []string{"orders"}, func(context.Context, *spool.Message) error { return nil },
			spool.WithStats(stats), spool.WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond), spool.WithLogger(slog.New(slog.DiscardHandler)))
	}()
	defer func() { stop(); <-subDone }()
	if _, err := c.Publish(ctx, "orders", []byte("k"), []byte("before")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the message published before the cut handled", func() bool { return stats.Acked.Load() >= 1 })

	cut := time.Now()
	proxy.cut()
	bound := spool.KeepaliveTime + spool.KeepaliveTimeout + 2*time.Second
	eventually(t, bound, "Subscribe reconnected after the cut", func() bool { return stats.Reconnects.Load() >= 1 })
	t.Logf("Subscribe reconnected %v after the cut (bound %v)", time.Since(cut).Round(time.Millisecond), bound)
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if _, err := c.Publish(pctx, "orders", []byte("k"), []byte("after")); err != nil {
		t.Fatalf("publish through the new connection after the cut: %v", err)
	}
}
