package testport

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeIsBelowTheEphemeralRangeAndBinds(t *testing.T) {
	start, _ := ephemeralRange()
	for range 50 {
		addr, err := Free("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p := port(t, addr); p < floor || p >= start {
			t.Fatalf("Free gave %s: want a port in %d-%d, below the ephemeral range's start %d", addr, floor, start-1, start)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("Free gave %s, which does not bind: %v", addr, err)
		}
		l.Close()
	}
}

func TestFreeNIsDistinct(t *testing.T) {
	addrs, err := FreeN("127.0.0.1", 20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("FreeN gave %s twice: %v", a, addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("FreeN gave %s, which does not bind: %v", a, err)
		}
		held = append(held, l)
	}
}

func TestFreeSpacedBindsBothPorts(t *testing.T) {
	start, _ := ephemeralRange()
	p, err := FreeSpaced("127.0.0.1", 10000)
	if err != nil {
		t.Fatal(err)
	}
	if p < floor || p+10000 >= start {
		t.Fatalf("FreeSpaced gave %d: want %d and %d below the ephemeral range's start %d", p, p, p+10000, start)
	}
	for _, q := range []int{p, p + 10000} {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(q)))
		if err != nil {
			t.Fatalf("port %d does not bind: %v", q, err)
		}
		l.Close()
	}
	if _, err := FreeSpaced("127.0.0.1", 0); err == nil {
		t.Fatal("FreeSpaced with offset 0: no error")
	}
}

// A port that is taken is never given out.
func TestFreeSkipsTakenPorts(t *testing.T) {
	start, end := ephemeralRange()
	lo, hi, err := window(start, end, 0)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	taken := map[string]bool{}
	for p := lo; p < hi && p < lo+2000; p++ {
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		if l, err := net.Listen("tcp", a); err == nil {
			held = append(held, l)
			taken[a] = true
		}
	}
	for range 100 {
		a, err := Free("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if taken[a] {
			t.Fatalf("Free gave %s, which this test holds", a)
		}
	}
}

func TestFreeOnAHostThatCannotBind(t *testing.T) {
	if a, err := Free("192.0.2.1"); err == nil { // TEST-NET-1: no local interface has it
		t.Fatalf("Free on an address of no interface gave %s", a)
	}
}

func TestWindow(t *testing.T) {
	for _, c := range []struct {
		start, end, offset int
		lo, hi             int
		fails              bool
	}{
		{start: 32768, end: 60999, lo: floor, hi: 32768},
		{start: 32768, end: 60999, offset: 10000, lo: floor, hi: 22768},
		{start: 49152, end: 65535, lo: floor, hi: 49152},               // macOS, BSD
		{start: 1024, end: 60999, lo: 61000, hi: 65536},                // widened below: above it
		{start: 1024, end: 60999, offset: 10000, fails: true},          // no room for a bus port
		{start: 5000, end: 65535, lo: 1024, hi: 5000},                  // only the well-known ports are left
		{start: 1024, end: 65535, fails: true},                         // nothing outside
		{start: 10500, end: 60999, offset: 0, lo: 61000, hi: 65536},    // below the floor: too little room
		{start: 15000, end: 64999, offset: 1000, lo: floor, hi: 14000}, // just enough
	} {
		lo, hi, err := window(c.start, c.end, c.offset)
		if c.fails {
			if err == nil {
				t.Errorf("window(%d, %d, %d) = %d, %d: want an error", c.start, c.end, c.offset, lo, hi)
			}
			continue
		}
		if err != nil || lo != c.lo || hi != c.hi {
			t.Errorf("window(%d, %d, %d) = %d, %d, %v: want %d, %d", c.start, c.end, c.offset, lo, hi, err, c.lo, c.hi)
		}
	}
}

func TestParseRange(t *testing.T) {
	if s, e, err := parseRange("32768\t60999\n"); err != nil || s != 32768 || e != 60999 {
		t.Fatalf("parseRange = %d, %d, %v", s, e, err)
	}
	for _, bad := range []string{"", "32768", "a b", "1 x", "60999 32768", "0 100", "1024 70000"} {
		if s, e, err := parseRange(bad); err == nil {
			t.Errorf("parseRange(%q) = %d, %d: want an error", bad, s, e)
		}
	}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
