package cluster

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/spoolmq/spool/engine/transport"
)

// pauseGate stands a member still, as SIGSTOP would, for fault injection
// in tests: while it is closed the member sends and takes no raft message
// (raft sends them again) and holds every NodeService call it receives —
// whatever the caller's deadline — until it opens again. Production code
// never closes it.
type pauseGate struct {
	stopped atomic.Pointer[chan struct{}] // non-nil: paused; closed on resume
	held    atomic.Int64                  // NodeService calls held, ever
	// deaf, set by the member, tells its raft host that no peer is heard
	// any more (each is declared dead): a stopped process's quiet groups
	// claim nothing after the pause, as the old ticking ones did once
	// their leader lost its quorum.
	deaf func()
}

// pause stops the member; resume lets it go on.
func (g *pauseGate) pause() {
	ch := make(chan struct{})
	g.stopped.Store(&ch)
	if g.deaf != nil {
		g.deaf()
	}
}

func (g *pauseGate) resume() {
	if ch := g.stopped.Swap(nil); ch != nil {
		close(*ch)
	}
}

func (g *pauseGate) paused() bool { return g.stopped.Load() != nil }

// hold is a unary interceptor: it waits while the member is paused.
func (g *pauseGate) hold(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if ch := g.stopped.Load(); ch != nil {
		g.held.Add(1)
		<-*ch
	}
	return handler(ctx, req)
}

// pausable is the raft host as the transport's handler, deaf while paused.
type pausable struct {
	transport.Handler
	g *pauseGate
}

var errPaused = errors.New("node paused (fault injection)")

func (p pausable) HandleMessage(m transport.Message) error {
	if p.g.paused() {
		return nil // lost on the way, as a stopped process's would be
	}
	return p.Handler.HandleMessage(m)
}

func (p pausable) HandleSnapshot(ctx context.Context, m transport.Message) error {
	if p.g.paused() {
		return errPaused
	}
	return p.Handler.HandleSnapshot(ctx, m)
}
