package netns

import (
	"net"
	"testing"
)

// Nodes reach each other and the host through the bridge; an isolated
// node reaches nobody and nobody reaches it; healed, it is reachable again;
// Close leaves nothing behind.
func TestIsolateAndHeal(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("fault suite not available here: %v", err)
	}
	n, err := New("t1", 201, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	l, err := net.Listen("tcp", n.Host()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	reach := func(i int) error {
		// bash's /dev/tcp from inside the namespace, bounded by timeout(1).
		return n.Command(i, "timeout", "1", "bash", "-c", "exec 3<>/dev/tcp/"+n.Host()+"/"+portOf(l)).Run()
	}
	if err := reach(0); err != nil {
		t.Fatalf("node 0 cannot reach the host: %v", err)
	}
	if err := n.Isolate(0); err != nil {
		t.Fatal(err)
	}
	if err := reach(0); err == nil {
		t.Fatal("isolated node 0 reached the host")
	}
	if err := reach(1); err != nil {
		t.Fatalf("node 1 cannot reach the host while node 0 is isolated: %v", err)
	}
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	if err := reach(0); err != nil {
		t.Fatalf("healed node 0 cannot reach the host: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ip("netns", "exec", n.NS(0), "true"); err == nil {
		t.Fatal("namespace left after Close")
	}
}

func portOf(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
