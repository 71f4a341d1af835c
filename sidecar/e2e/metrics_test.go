package e2e

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// metricValue reads one sample from spoold's /metrics; series is the name
// with labels exactly as exposed. A missing series is 0.
func metricValue(t *testing.T, n *node, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// saveProfile writes one of spoold's pprof profiles to path (for diagnosis).
func saveProfile(t *testing.T, n *node, name, path string) {
	t.Helper()
	resp, err := http.Get("http://" + n.admin + "/debug/pprof/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Fatal(err)
	}
}

// spoold gives the Go runtime node.memory_limit as its soft memory limit:
// the default, and a value from the file.
func TestMemoryLimitApplied(t *testing.T) {
	for _, c := range []struct {
		nodeExtra string
		want      float64
	}{
		{"", 112 << 20},
		{"  memory_limit: 268435456\n", 256 << 20},
	} {
		n := startNodeWith(t, c.nodeExtra, "")
		if got := metricValue(t, n, "spool_memory_limit_bytes"); got != c.want {
			t.Errorf("node section %q: spool_memory_limit_bytes %v, want %v", c.nodeExtra, got, c.want)
		}
	}
}
