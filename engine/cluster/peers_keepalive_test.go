package cluster

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/engine/transport"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// silentProxy relays TCP connections to target until silence: from then on
// every connection it holds stays open and carries nothing more, in either
// direction — as a connection whose packets a partition drops looks from
// each end, and as it still looks for seconds after the partition heals
// while TCP waits out its retransmission backoff. Connections accepted
// after heal relay again; the silenced ones never do.
type silentProxy struct {
	ln     net.Listener
	target string
	silent atomic.Bool
	mu     sync.Mutex
	stuck  []*atomic.Bool // one per connection
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *silentProxy) addr() string { return p.ln.Addr().String() }

func (p *silentProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		stuck := &atomic.Bool{}
		stuck.Store(p.silent.Load())
		p.mu.Lock()
		p.stuck = append(p.stuck, stuck)
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Go(func() { relay(out, in, stuck) })
		p.wg.Go(func() { relay(in, out, stuck) })
	}
}

// relay copies from src to dst, dropping what it reads while stuck.
func relay(dst io.Writer, src io.Reader, stuck *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !stuck.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// silence makes every connection held now, and any accepted until heal,
// carry nothing.
func (p *silentProxy) silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent.Store(true)
	for _, s := range p.stuck {
		s.Store(true)
	}
}

// heal lets new connections relay; the silenced ones stay silent.
func (p *silentProxy) heal() { p.silent.Store(false) }

func (p *silentProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// metadataOnly answers Metadata; the forwarding client's peer here.
type metadataOnly struct {
	clusterv1.UnimplementedNodeServiceServer
}

func (metadataOnly) Metadata(context.Context, *clusterv1.MetadataRequest) (*clusterv1.MetadataResponse, error) {
	return &clusterv1.MetadataResponse{}, nil
}

// TestPeerClientReplacesASilentConnection (issue 28, defect 13): a
// forwarding connection to a peer goes silent for longer than
// PeerKeepaliveTime plus PeerKeepaliveTimeout (its bytes are dropped, and
// after the heal that connection still carries nothing, as one in TCP
// retransmission backoff does); once the partition heals, a call through
// the node's NodeService client is answered within PeerReconnectMax plus
// PeerConnectTimeout, over a new connection. Before (the clients had no
// keepalive) every call after the heal hung on the silent connection
// until its deadline. In-process the proxy's TCP acknowledges what it
// drops, so only the keepalive ping notices (after 10 s); across a real
// partition TCP_USER_TIMEOUT does, 2 s after the first unacknowledged
// bytes (chaos TestPublishAfterOneWayHeal).
func TestPeerClientReplacesASilentConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(transport.PeerServerOptions()...)
	clusterv1.RegisterNodeServiceServer(srv, metadataOnly{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() { srv.Stop(); <-served }()
	px := newSilentProxy(t, ln.Addr().String())
	pc := newPeerClients(1<<20, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer pc.close()
	pc.set(2, px.addr())
	call := func(d time.Duration) error {
		c, err := pc.client(2)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err = c.Metadata(ctx, &clusterv1.MetadataRequest{})
		return err
	}
	if err := call(5 * time.Second); err != nil {
		t.Fatalf("a call before the partition: %v", err)
	}
	px.silence()
	cut := transport.PeerKeepaliveTime + transport.PeerKeepaliveTimeout + time.Second
	if err := call(cut); err == nil {
		t.Fatal("a call was answered through a silent connection")
	}
	px.heal()
	healed := time.Now()
	bound := transport.PeerReconnectMax + transport.PeerConnectTimeout
	var last error
	for time.Since(healed) < 3*bound {
		if last = call(time.Second); last == nil {
			break
		}
	}
	took := time.Since(healed)
	switch {
	case last != nil:
		t.Fatalf("no call answered within %v of the heal: %v", took.Round(time.Millisecond), last)
	case took > bound:
		t.Fatalf("the first call answered %v after the heal, want within %v", took.Round(time.Millisecond), bound)
	}
	t.Logf("answered %v after the heal", took.Round(time.Millisecond))
}
