// Package netns gives each node of a fault run its own Linux network
// namespace on a bridge the suite creates and removes, so that faults cut
// real network links: Isolate takes a node's link down (cut off from its
// peers, Redis and its clients at once), Heal brings it back; CutFrom
// makes a one-way cut (node i stops hearing some peers but still sends to
// them) with an nftables table inside node i's namespace, and Uncut, Heal,
// HealAll or Close remove it; Flaky drops a share of a node's packets at
// random (nftables), Delay delays them (tc netem), Steady removes both.
// It needs root and iproute2 (`ip`), nft for one-way cuts and loss
// (OneWayAvailable says whether it is there), and the kernel's sch_netem
// for delays (DelayAvailable); nothing is
// routed beyond the bridge's subnet, so traffic goes only to loopback and
// to the addresses of the namespaces.
package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// cmdTimeout bounds every ip command.
const cmdTimeout = 10 * time.Second

// Net is a bridge and one namespace per node.
type Net struct {
	id     string // short, unique on the machine: names the bridge, links and namespaces
	subnet string // "10.77.N": the bridge is .1, node i is .(10+i)
	nodes  int
	up     []bool // each node's link state as Isolate/Heal left it
	cut    []bool // node i has a one-way cut (CutFrom) in place
	flaky  []bool // node i's link loses packets (Flaky)
	slow   []bool // node i's link delays packets (Delay)
}

// cutTable is the nftables table CutFrom adds in a node's namespace; the
// namespace owns it, so removing the namespace removes it too.
const cutTable = "spool_cut"

// flakyTable is the nftables table Flaky adds in a node's namespace.
const flakyTable = "spool_flaky"

// Available says why the suite cannot run here (nil: it can).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("iproute2's ip is not installed")
	}
	// Root in a container may still lack CAP_NET_ADMIN: try it.
	probe := fmt.Sprintf("spool-probe-%d", os.Getpid())
	if err := ip("netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	if err := ip("netns", "del", probe); err != nil {
		return fmt.Errorf("cannot remove the network namespace %s: %w", probe, err)
	}
	return nil
}

// OneWayAvailable says why one-way cuts cannot be made here (nil: they
// can): they need nft, and nftables in a network namespace.
func OneWayAvailable() error {
	if err := Available(); err != nil {
		return err
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("one-way cuts need nftables' nft, which is not installed")
	}
	probe := fmt.Sprintf("spool-nftprobe-%d", os.Getpid())
	if err := ip("netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	defer func() { _ = ip("netns", "del", probe) }()
	if err := ip("netns", "exec", probe, "nft", "add", "table", "inet", cutTable); err != nil {
		return fmt.Errorf("nftables does not work in a network namespace: %w", err)
	}
	return nil
}

// New creates the bridge (host address subnet.1/24) and nodes namespaces
// (node i at subnet.(10+i)), removing first any left by a run with the
// same id that did not clean up.
func New(id string, third int, nodes int) (*Net, error) {
	if len(id) > 6 || nodes < 1 || nodes > 9 || third < 1 || third > 254 {
		return nil, fmt.Errorf("netns: id %q (at most 6 bytes), %d nodes (1-9), subnet 10.77.%d", id, nodes, third)
	}
	n := &Net{id: id, subnet: fmt.Sprintf("10.77.%d", third), nodes: nodes, up: make([]bool, nodes), cut: make([]bool, nodes), flaky: make([]bool, nodes), slow: make([]bool, nodes)}
	n.remove()
	steps := [][]string{
		{"link", "add", n.bridge(), "type", "bridge"},
		{"addr", "add", n.Host() + "/24", "dev", n.bridge()},
		{"link", "set", n.bridge(), "up"},
	}
	for i := range nodes {
		steps = append(steps,
			[]string{"netns", "add", n.NS(i)},
			[]string{"link", "add", n.hostLink(i), "type", "veth", "peer", "name", n.nsLink(i)},
			[]string{"link", "set", n.nsLink(i), "netns", n.NS(i)},
			[]string{"link", "set", n.hostLink(i), "master", n.bridge()},
			[]string{"link", "set", n.hostLink(i), "up"},
			[]string{"-n", n.NS(i), "addr", "add", n.IP(i) + "/24", "dev", n.nsLink(i)},
			[]string{"-n", n.NS(i), "link", "set", n.nsLink(i), "up"},
			[]string{"-n", n.NS(i), "link", "set", "lo", "up"},
		)
		n.up[i] = true
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			n.remove()
			return nil, err
		}
	}
	return n, nil
}

func (n *Net) bridge() string        { return "spbr" + n.id }
func (n *Net) hostLink(i int) string { return fmt.Sprintf("sp%sh%d", n.id, i) }
func (n *Net) nsLink(i int) string   { return fmt.Sprintf("sp%sn%d", n.id, i) }

// NS is node i's namespace.
func (n *Net) NS(i int) string { return fmt.Sprintf("spool-%s-n%d", n.id, i) }

// Host is the bridge's address, reachable from every namespace (Redis
// and the workload listen or connect there).
func (n *Net) Host() string { return n.subnet + ".1" }

// IP is node i's address.
func (n *Net) IP(i int) string { return fmt.Sprintf("%s.%d", n.subnet, 10+i) }

// Command runs name in node i's namespace (`ip netns exec` execs it: the
// process's pid is the command's own, so signals reach it).
func (n *Net) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.NS(i), name}, args...)...)
}

// Isolate cuts node i off from everything but its own loopback.
func (n *Net) Isolate(i int) error {
	if err := ip("link", "set", n.hostLink(i), "down"); err != nil {
		return err
	}
	n.up[i] = false
	return nil
}

// CutFrom makes node i stop hearing the given nodes: packets arriving in
// node i's namespace from their addresses are dropped (an nftables input
// rule there), while node i's own packets still reach them. Over TCP that
// is a one-way partition: what node i writes on a connection it already
// has is delivered, but their answers and acknowledgements are not, and
// no new connection is made in either direction. Uncut removes it.
func (n *Net) CutFrom(i int, from []int) error {
	if i < 0 || i >= n.nodes || len(from) == 0 {
		return fmt.Errorf("netns: cut node %d (of %d) from %v", i, n.nodes, from)
	}
	addrs := make([]string, 0, len(from))
	for _, j := range from {
		if j < 0 || j >= n.nodes || j == i {
			return fmt.Errorf("netns: cut node %d from node %d (of %d)", i, j, n.nodes)
		}
		addrs = append(addrs, n.IP(j))
	}
	rules := fmt.Sprintf("table inet %s {\n chain input {\n  type filter hook input priority 0; policy accept;\n  ip saddr { %s } drop\n }\n}\n", cutTable, strings.Join(addrs, ", "))
	_ = n.Uncut(i) // one cut per node: a new one replaces the old
	if err := run(rules, "ip", "netns", "exec", n.NS(i), "nft", "-f", "-"); err != nil {
		return err
	}
	n.cut[i] = true
	return nil
}

// Uncut removes node i's one-way cut, if it has one.
func (n *Net) Uncut(i int) error {
	if !n.cut[i] {
		return nil
	}
	if err := ip("netns", "exec", n.NS(i), "nft", "delete", "table", "inet", cutTable); err != nil {
		return err
	}
	n.cut[i] = false
	return nil
}

// Flaky makes node i's link lose lossPct percent of the packets it sends
// and of those it receives, each drawn at random (an nftables table in its
// namespace: numgen random mod 100 < lossPct drop; loopback is spared).
// Steady, Heal, HealAll or Close remove it.
func (n *Net) Flaky(i, lossPct int) error {
	if i < 0 || i >= n.nodes || lossPct < 1 || lossPct > 99 {
		return fmt.Errorf("netns: %d%% loss on node %d (of %d): want 1-99%%", lossPct, i, n.nodes)
	}
	rules := fmt.Sprintf(`table inet %s {
 chain input { type filter hook input priority 0; policy accept; iifname "lo" accept; numgen random mod 100 < %d drop; }
 chain output { type filter hook output priority 0; policy accept; oifname "lo" accept; numgen random mod 100 < %d drop; }
}
`, flakyTable, lossPct, lossPct)
	_ = n.Steady(i) // one loss rate per node: a new one replaces the old
	if err := run(rules, "ip", "netns", "exec", n.NS(i), "nft", "-f", "-"); err != nil {
		return err
	}
	n.flaky[i] = true
	return nil
}

// DelayAvailable says why Delay cannot be used here (nil: it can): it
// needs tc and the kernel's sch_netem, which some kernels lack.
func DelayAvailable() error {
	if err := Available(); err != nil {
		return err
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return errors.New("delays need iproute2's tc, which is not installed")
	}
	probe := fmt.Sprintf("spool-tcprobe-%d", os.Getpid())
	if err := ip("netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	defer func() { _ = ip("netns", "del", probe) }()
	if err := ip("netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"); err != nil {
		return fmt.Errorf("no sch_netem: %w", err)
	}
	return nil
}

// Delay makes node i's link delay what it sends by delay ± jitter (tc
// netem on its side of the link). Steady, Heal, HealAll or Close remove it.
func (n *Net) Delay(i int, delay, jitter time.Duration) error {
	if i < 0 || i >= n.nodes || delay <= 0 || jitter < 0 || jitter > delay {
		return fmt.Errorf("netns: delay %v ± %v on node %d (of %d)", delay, jitter, i, n.nodes)
	}
	verb := "add"
	if n.slow[i] {
		verb = "change"
	}
	if err := ip("netns", "exec", n.NS(i), "tc", "qdisc", verb, "dev", n.nsLink(i), "root", "netem",
		"delay", fmt.Sprintf("%dms", delay.Milliseconds()), fmt.Sprintf("%dms", jitter.Milliseconds())); err != nil {
		return err
	}
	n.slow[i] = true
	return nil
}

// Steady removes node i's packet loss (Flaky) and delay (Delay), if any.
func (n *Net) Steady(i int) error {
	var errs []error
	if n.flaky[i] {
		if err := ip("netns", "exec", n.NS(i), "nft", "delete", "table", "inet", flakyTable); err != nil {
			errs = append(errs, err)
		} else {
			n.flaky[i] = false
		}
	}
	if n.slow[i] {
		if err := ip("netns", "exec", n.NS(i), "tc", "qdisc", "del", "dev", n.nsLink(i), "root"); err != nil {
			errs = append(errs, err)
		} else {
			n.slow[i] = false
		}
	}
	return errors.Join(errs...)
}

// Heal brings node i's link back and removes its one-way cut, its loss
// and its delay.
func (n *Net) Heal(i int) error {
	if err := errors.Join(n.Uncut(i), n.Steady(i)); err != nil {
		return err
	}
	if err := ip("link", "set", n.hostLink(i), "up"); err != nil {
		return err
	}
	n.up[i] = true
	return nil
}

// HealAll brings every link back and removes every one-way cut.
func (n *Net) HealAll() error {
	var errs []error
	for i := range n.nodes {
		if !n.up[i] || n.cut[i] || n.flaky[i] || n.slow[i] {
			errs = append(errs, n.Heal(i))
		}
	}
	return errors.Join(errs...)
}

// Close removes the namespaces, links and bridge.
func (n *Net) Close() error { return n.remove() }

// remove deletes what New makes, whatever exists of it.
func (n *Net) remove() error {
	var errs []error
	for i := range n.nodes {
		_ = ip("link", "del", n.hostLink(i)) // takes its peer with it; may be gone
		if err := ip("netns", "del", n.NS(i)); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	_ = ip("link", "del", n.bridge())
	return errors.Join(errs...)
}

// ip runs one ip command, bounded by cmdTimeout.
func ip(args ...string) error { return run("", "ip", args...) }

// run runs one command with stdin, bounded by cmdTimeout.
func run(stdin, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
