package transport

import (
	"net"
	"testing"
	"time"
)

// A node that sends no raft message still lives for its peers (its
// streams' empty batches), and one that goes silent is declared dead
// after LivenessTimeout even when nothing fails on the receiving side:
// node 2 never dials node 1, so only liveness can tell it that node 1 is
// gone.
func TestGRPCNodeLiveness(t *testing.T) {
	// A timeout far above the interval: a loaded machine (make test runs
	// packages in parallel) must not starve the frames of an idle node.
	fast := func(c *GRPCConfig) { c.LivenessInterval, c.LivenessTimeout = 50*time.Millisecond, time.Second }
	a := startNode(t, 1, "127.0.0.1:0", fast)
	b := startNode(t, 2, "127.0.0.1:0", fast)
	defer b.stop(t)
	if b.t.Live(1) {
		t.Fatal("node 1 live to node 2 before it was ever heard from")
	}
	if err := a.t.AddPeer(2, b.addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 1 live to node 2", func() bool { return b.t.Live(1) })
	// Idle past the timeout: the empty batches keep it live (20 a second
	// per lane at most; 50 frames span at least 1.25 timeouts).
	frames := b.t.Stats().FramesReceived
	waitFor(t, "liveness frames", func() bool { return b.t.Stats().FramesReceived >= frames+50 })
	b.h.mu.Lock()
	lost := b.h.unreachable[1]
	b.h.mu.Unlock()
	if lost != 0 || !b.t.Live(1) || b.t.Stats().PeersDeclaredDead != 0 {
		t.Fatalf("an idle node declared dead: unreachable %d, live %v, %+v", lost, b.t.Live(1), b.t.Stats())
	}
	if len(b.h.messages()) != 0 {
		t.Fatal("liveness frames reached the handler as messages")
	}
	start := time.Now()
	a.stop(t)
	waitFor(t, "node 1 declared dead", func() bool {
		b.h.mu.Lock()
		defer b.h.mu.Unlock()
		return b.h.unreachable[1] == 1
	})
	// Its last frame may have left up to an interval before the stop.
	if took := time.Since(start); took < time.Second-50*time.Millisecond || b.t.Live(1) || b.t.Stats().PeersDeclaredDead != 1 {
		t.Fatalf("declared dead after %v (timeout 1s), live %v, %+v", took, b.t.Live(1), b.t.Stats())
	}
}

func TestLivenessSettingsRefused(t *testing.T) {
	for _, c := range []GRPCConfig{{LivenessInterval: time.Second, LivenessTimeout: time.Second}, {LivenessInterval: -1}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		c.ClusterID, c.NodeID, c.Handler, c.Listener = "x", 1, newRecorder(), ln
		if err := c.validate(); err == nil {
			t.Errorf("interval %v, timeout %v accepted", c.LivenessInterval, c.LivenessTimeout)
		}
	}
}
