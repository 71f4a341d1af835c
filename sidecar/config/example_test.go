package config

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The example config's comments state defaults: each "Default N." on an
// integer setting is the default the code applies.
func TestExampleStatesTheCodesDefaults(t *testing.T) {
	var c Config
	c.Topics = []TopicConfig{{}}
	c.Subscriptions = []SubscriptionConfig{{}}
	c.Storage.Backend = BackendJetStream // its defaults too
	c.ApplyDefaults()
	s, tp := c.Subscriptions[0], c.Topics[0]
	l := c.Limits
	defaults := map[string]int64{
		"index_interval_bytes": c.Storage.IndexIntervalBytes,
		"max_key_bytes":        int64(l.MaxKeyBytes),
		"max_headers":          int64(l.MaxHeaders),
		"max_header_bytes":     int64(l.MaxHeaderBytes),
		"max_batch_messages":   int64(l.MaxBatchMessages),
		"max_id_bytes":         int64(l.MaxIDBytes),
		"partitions":           int64(tp.Partitions),
		"retention_bytes":      tp.RetentionBytes,
		"max_attempts":         int64(s.MaxAttempts),
		"max_in_flight":        int64(s.MaxInFlight),
		"window_messages":      int64(s.WindowMessages),
		"max_parked_keys":      int64(s.MaxParkedKeys),
		"replicas":             int64(c.Storage.JetStream.Replicas),
	}
	b, err := os.ReadFile("testdata/spool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stated := regexp.MustCompile(`Default (\d+)\.\s*$`)
	key := regexp.MustCompile(`^\s*-?\s*([a-z_]+):`)
	lines := strings.Split(string(b), "\n")
	checked := 0
	for i, line := range lines[:len(lines)-1] {
		m := stated.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		k := key.FindStringSubmatch(lines[i+1])
		if k == nil {
			continue
		}
		want, ok := defaults[k[1]]
		if !ok {
			t.Errorf("testdata/spool.yaml:%d states a default for %s, which this test does not know: add it", i+1, k[1])
			continue
		}
		if got, _ := strconv.ParseInt(m[1], 10, 64); got != want {
			t.Errorf("testdata/spool.yaml:%d says %s defaults to %d; the code's default is %d", i+1, k[1], got, want)
		}
		checked++
	}
	if checked < len(defaults) {
		t.Errorf("checked %d stated defaults, want at least %d", checked, len(defaults))
	}
}
