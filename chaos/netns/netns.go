// Package netns gives each node of a fault run its own Linux network
// namespace on a bridge the suite creates and removes, so that faults cut
// real network links: Isolate takes a node's link down (cut off from its
// peers, Redis and its clients at once), Heal brings it back. It needs
// root and iproute2 (`ip`); nothing is routed beyond the bridge's subnet,
// so traffic goes only to loopback and to the addresses of the namespaces.
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
}

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

// New creates the bridge (host address subnet.1/24) and nodes namespaces
// (node i at subnet.(10+i)), removing first any left by a run with the
// same id that did not clean up.
func New(id string, third int, nodes int) (*Net, error) {
	if len(id) > 6 || nodes < 1 || nodes > 9 || third < 1 || third > 254 {
		return nil, fmt.Errorf("netns: id %q (at most 6 bytes), %d nodes (1-9), subnet 10.77.%d", id, nodes, third)
	}
	n := &Net{id: id, subnet: fmt.Sprintf("10.77.%d", third), nodes: nodes, up: make([]bool, nodes)}
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

// Heal brings node i's link back.
func (n *Net) Heal(i int) error {
	if err := ip("link", "set", n.hostLink(i), "up"); err != nil {
		return err
	}
	n.up[i] = true
	return nil
}

// HealAll brings every link back.
func (n *Net) HealAll() error {
	var errs []error
	for i := range n.nodes {
		if !n.up[i] {
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
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
