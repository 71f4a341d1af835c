package testredis

import (
	"strings"
	"testing"
)

func TestClusterIsOKAndSpreadsSlots(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("addrs = %v", c.Addrs())
	}
	seen := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		n, err := c.NodeFor(k)
		if err != nil {
			t.Fatal(err)
		}
		seen[n.Addr()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("ten keys all on %v", seen)
	}
}

func TestSentinelNamesMaster(t *testing.T) {
	s := StartSentinel(t)
	v, err := do(s.Addrs()[0], nil, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName())
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := v.([]any); len(a) != 2 || a[0].(string)+":"+a[1].(string) != s.Master().Addr() {
		t.Fatalf("sentinel names %v, master is %s", v, s.Master().Addr())
	}
}

func TestACLUser(t *testing.T) {
	s := StartWith(t, Options{Users: []string{"spool on >secret ~spool:* +get"}})
	v, err := s.Do("ACL", "GETUSER", "spool")
	if err != nil || v == nil {
		t.Fatalf("ACL GETUSER spool = %v, %v", v, err)
	}
	if _, err := s.Do("AUTH", "spool", "wrong"); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("AUTH with a wrong password: %v", err)
	}
}

func TestTLS(t *testing.T) {
	s := StartWith(t, Options{TLS: true})
	if s.TLSConfig() == nil {
		t.Fatal("no client TLS config")
	}
	if err := pingTLS(s.Addr(), s.TLSConfig()); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	if err := ping(s.Addr()); err == nil {
		t.Fatal("a plaintext PING to the TLS port was answered")
	}
}
