package cluster

import (
	"net"
	"sync"
	"testing"
	"time"
)

// blackHole accepts TCP connections and never answers on them, as a
// stopped (SIGSTOP) or hung node does: the kernel completes the handshake,
// nothing reads.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// A node joins through the first of its join addresses that answers, not
// after waiting out each one that does not: the chaos suite's fourth node
// (membership seed 4152) joined 9 s late, its first join address a stopped
// node, and its app's connect timed out. The candidates are asked together;
// the join token makes the controller admit the node once whoever passes
// the request on.
func TestClusterJoinPastAnUnresponsiveCandidate(t *testing.T) {
	tc := newTestCluster(t, 1)
	awaitCond(t, 10*time.Second, "the first node ready", func() error { return tc.nodes[0].n.awaitReady(time.Second) })
	cn := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{blackHole(t), tc.nodes[0].addr}}
	tc.nodes = append(tc.nodes, cn)
	start := time.Now()
	tc.start(cn)
	// The call to a candidate waits up to 10 s (join's callTimeout): joined
	// well within it means the silent one did not hold the others back.
	awaitCond(t, 5*time.Second, "the new node a member", func() error { return cn.n.awaitReady(100 * time.Millisecond) })
	t.Logf("joined in %v with a silent first join address", time.Since(start).Round(time.Millisecond))
	if id := cn.n.asMember().id.NodeID; id != 2 {
		t.Fatalf("the new node got id %d, want 2 (admitted once)", id)
	}
}
