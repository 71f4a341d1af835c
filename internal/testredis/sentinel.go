package testredis

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// sentinelTimeout bounds the wait for the sentinel to name the master.
const sentinelTimeout = 10 * time.Second

// MasterName is the name the sentinel monitors the master under.
const MasterName = "mymaster"

// Sentinel is a master and one sentinel monitoring it (quorum 1), both owned
// by the test.
type Sentinel struct {
	master   *Server
	sentinel *Server
}

// StartSentinel starts a master, then a sentinel (`redis-server --sentinel`)
// monitoring it as MasterName with quorum 1, and waits until the sentinel
// answers SENTINEL GET-MASTER-ADDR-BY-NAME with the master's address. Both
// are killed in t.Cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	m := Start(t)
	s := StartWith(t, Options{sentinel: true, confLines: []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", MasterName, m.port),
		"sentinel down-after-milliseconds " + MasterName + " 5000",
	}})
	deadline := time.Now().Add(sentinelTimeout)
	for {
		v, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
		if a, ok := v.([]any); ok && len(a) == 2 && a[0] == "127.0.0.1" && a[1] == strconv.Itoa(m.port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("testredis: sentinel %s did not name master %s within %v: %v %v\nsentinel log:\n%s",
				s.Addr(), m.Addr(), sentinelTimeout, v, err, s.Log())
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling child processes' readiness
	}
	return &Sentinel{master: m, sentinel: s}
}

// Addrs are the sentinels' addresses.
func (s *Sentinel) Addrs() []string { return []string{s.sentinel.Addr()} }

// MasterName is the monitored master's name.
func (s *Sentinel) MasterName() string { return MasterName }

// Master is the monitored master.
func (s *Sentinel) Master() *Server { return s.master }
