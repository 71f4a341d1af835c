package netns

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
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
	// A link just set up may take a moment to forward (bridge port, ARP):
	// await it, bounded.
	healed := time.Now()
	for err := reach(0); err != nil; err = reach(0) {
		if time.Since(healed) > 10*time.Second {
			t.Fatalf("healed node 0 cannot reach the host after %v: %v", time.Since(healed).Round(time.Millisecond), err)
		}
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

// listenEnv makes the test binary, started in a namespace, a UDP listener
// that prints the first datagram it receives (or nothing within 3 s).
const listenEnv = "SPOOL_NETNS_TEST_UDP_LISTEN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(listenEnv); addr != "" {
		os.Exit(listenOnce(addr))
	}
	os.Exit(m.Run())
}

func listenOnce(addr string) int {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	fmt.Println("listening")
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	k, _, err := c.ReadFrom(buf)
	if err == nil {
		fmt.Print(string(buf[:k]))
	}
	return 0
}

// A one-way cut: node 0, cut from node 1, still reaches node 1, but node 1
// no longer reaches node 0 (UDP, so that each direction shows alone);
// node 0 still hears the host; Uncut, and node 1 reaches node 0 again;
// Heal removes a cut too; Close leaves nothing.
func TestCutFromAndUncut(t *testing.T) {
	if err := OneWayAvailable(); err != nil {
		t.Skipf("one-way cuts not available here: %v", err)
	}
	n, err := New("t2", 202, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	heard := func(from, to int) bool { t.Helper(); return heardUDP(t, n, from, to) }
	if !heard(1, 0) || !heard(0, 1) {
		t.Fatal("nodes do not hear each other before any cut")
	}
	if err := n.CutFrom(0, []int{1}); err != nil {
		t.Fatal(err)
	}
	if heard(1, 0) {
		t.Fatal("node 0 heard node 1 through a cut")
	}
	if !heard(0, 1) {
		t.Fatal("node 1 does not hear node 0: the cut is not one-way")
	}
	if err := n.Uncut(0); err != nil {
		t.Fatal(err)
	}
	if !heard(1, 0) {
		t.Fatal("node 0 does not hear node 1 after Uncut")
	}
	if err := n.CutFrom(0, []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	if !heard(1, 0) {
		t.Fatal("node 0 does not hear node 1 after HealAll")
	}
	if err := n.CutFrom(0, []int{0}); err == nil {
		t.Fatal("a node cut from itself was accepted")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// heardUDP reports whether node to received a datagram node from sent.
func heardUDP(t *testing.T, n *Net, from, to int) bool {
	t.Helper()
	addr := n.IP(to) + ":7999"
	l := n.Command(to, os.Args[0])
	l.Env = append(os.Environ(), listenEnv+"="+addr)
	out, err := l.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("listener in node %d: %q %v", to, line, err)
	}
	msg := fmt.Sprintf("from-%d", from)
	if err := n.Command(from, "bash", "-c", "echo -n "+msg+" >/dev/udp/"+n.IP(to)+"/7999").Run(); err != nil {
		t.Fatalf("send from node %d: %v", from, err)
	}
	got, _ := io.ReadAll(r)
	_ = l.Wait()
	return string(got) == msg
}

// A flaky link: at 99% loss on node 0's link, of two datagrams each way at
// least one is lost (all four arrive with a chance of 1e-8); Steady, and
// they arrive again. A delay where the kernel has sch_netem, else it says
// why it is skipped.
func TestFlakyAndSteady(t *testing.T) {
	if err := OneWayAvailable(); err != nil {
		t.Skipf("nftables not available here: %v", err)
	}
	n, err := New("t3", 203, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Flaky(0, 99); err != nil {
		t.Fatal(err)
	}
	if heardUDP(t, n, 1, 0) && heardUDP(t, n, 0, 1) && heardUDP(t, n, 1, 0) && heardUDP(t, n, 0, 1) {
		t.Fatal("at 99% loss on node 0's link, four datagrams in a row got through")
	}
	if err := n.Flaky(0, 100); err == nil {
		t.Fatal("a loss of 100% was accepted (that is Isolate)")
	}
	if err := n.Steady(0); err != nil {
		t.Fatal(err)
	}
	if !heardUDP(t, n, 1, 0) || !heardUDP(t, n, 0, 1) {
		t.Fatal("nodes do not hear each other after Steady")
	}
	if err := DelayAvailable(); err != nil {
		t.Logf("skipped delay: %v", err)
	} else {
		if err := n.Delay(0, 50*time.Millisecond, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := n.HealAll(); err != nil {
			t.Fatal(err)
		}
		if n.slow[0] {
			t.Fatal("HealAll left node 0's delay")
		}
	}
}
