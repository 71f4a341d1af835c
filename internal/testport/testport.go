// Package testport picks TCP ports for servers that a test (or the
// loadtest) starts in another process — spoold, redis-server,
// nats-server, Kafka — and so must name before the server binds them.
//
// Why not listen on ":0", read the port and close the listener: the kernel
// hands out an ephemeral port for that (Linux: 32768–60999,
// /proc/sys/net/ipv4/ip_local_port_range), the same range it takes the
// local port of every outgoing connection from. Between the close and the
// child's bind, any connect on the machine — the test's own clients, a
// spoold dialing its peers, redis-server's cluster bus — may be given
// that port, and the child fails with "bind: address already in use".
// The same holds when a test kills a server and starts it again on its
// port. Ports below the ephemeral range are never given to outgoing
// connections, so a random one there that binds now stays free for the
// child; only another process picking the very same port in the same
// instant can take it.
//
// A server that runs in the test's own process should not use this
// package: it listens on "127.0.0.1:0" and keeps the listener.
//
// testport does not import testing: the loadtest uses it outside tests.
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

const (
	// rangeFile is where Linux keeps its ephemeral port range.
	rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	// defaultStart and defaultEnd are Linux's default ephemeral range,
	// used where rangeFile cannot be read. macOS's (49152–65535) lies
	// inside it, so the ports below defaultStart are safe there too.
	defaultStart, defaultEnd = 32768, 60999
	// floor is the lowest port picked: below it live the well-known
	// ports of databases and dev servers (5432, 6379, 8080, 9092, ...).
	floor = 10000
	// minWindow is the fewest ports a window outside the ephemeral range
	// must hold for random picks to rarely meet.
	minWindow = 1000
	// tries bounds the random picks of one call.
	tries = 200
)

// Free returns host:port of a TCP port on host that is free now and lies
// outside the kernel's ephemeral port range (see the package comment).
func Free(host string) (string, error) {
	addrs, err := FreeN(host, 1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// FreeN returns n distinct free host:port addresses, as Free. Each is
// held until all are found, so two servers of one test never get the
// same port.
func FreeN(host string, n int) ([]string, error) {
	ports, err := pick(host, n, 0)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return addrs, nil
}

// Ports returns n distinct free port numbers on host, as FreeN.
func Ports(host string, n int) ([]int, error) { return pick(host, n, 0) }

// FreeSpaced returns a port p on host such that p and p+offset are both
// free now and outside the ephemeral range: a Redis Cluster node listens
// on its port and on its port+10000 (the cluster bus).
func FreeSpaced(host string, offset int) (int, error) {
	if offset <= 0 {
		return 0, fmt.Errorf("testport: offset %d: want a positive offset", offset)
	}
	ports, err := pick(host, 1, offset)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// pick finds n distinct ports p (and p+offset when offset > 0) that bind
// on host now, holding every listener until all are found.
func pick(host string, n, offset int) ([]int, error) {
	start, end := ephemeralRange()
	lo, hi, err := window(start, end, offset)
	if err != nil {
		return nil, err
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	var lastErr error
	bind := func(p int) bool {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			lastErr = err // taken, or host cannot be bound at all
			return false
		}
		held = append(held, l)
		return true
	}
	ports := make([]int, 0, n)
	for range tries {
		if len(ports) == n {
			break
		}
		if p := lo + rand.IntN(hi-lo); bind(p) && (offset == 0 || bind(p+offset)) {
			ports = append(ports, p)
		}
	}
	if len(ports) == n {
		return ports, nil
	}
	return nil, fmt.Errorf("testport: found %d of %d free ports in %d-%d on %s in %d tries (last error: %v)", len(ports), n, lo, hi-1, host, tries, lastErr)
}

// window is the range [lo, hi) that ports p are picked from so that p and
// p+offset lie outside the ephemeral range [start, end]: below it if there
// is room, else above it.
func window(start, end, offset int) (lo, hi int, err error) {
	if lo, hi := floor, start-offset; hi-lo >= minWindow {
		return lo, hi, nil
	}
	if lo, hi := max(end+1, 1024), 65536-offset; hi-lo >= minWindow {
		return lo, hi, nil
	}
	if lo, hi := 1024, start-offset; hi-lo >= minWindow {
		return lo, hi, nil
	}
	return 0, 0, fmt.Errorf("testport: the ephemeral port range %d-%d (%s) leaves fewer than %d ports outside it for test servers (spaced by %d): narrow it, e.g. sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\"", start, end, rangeFile, minWindow, offset)
}

// ephemeralRange is the kernel's ephemeral port range, or Linux's default
// where it cannot be read.
func ephemeralRange() (start, end int) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return defaultStart, defaultEnd
	}
	start, end, err = parseRange(string(b))
	if err != nil {
		return defaultStart, defaultEnd
	}
	return start, end
}

// parseRange reads ip_local_port_range's "start<TAB>end\n".
func parseRange(s string) (start, end int, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("testport: %q: want two ports", s)
	}
	if start, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, err
	}
	if end, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	if start < 1 || end > 65535 || start > end {
		return 0, 0, errors.New("testport: " + strconv.Quote(s) + ": not a port range")
	}
	return start, end, nil
}
