package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadExample(t *testing.T) {
	c, err := Load("testdata/spool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.ID != "spool-a" || len(c.Node.AppListen) != 2 || c.Node.AppListen[1] != "unix:///run/spool/app.sock" {
		t.Errorf("node = %+v", c.Node)
	}
	orders, ok := c.Topic("orders")
	if !ok || orders.Partitions != 8 || orders.Retention != 168*time.Hour {
		t.Errorf("orders = %+v, %v", orders, ok)
	}
	if p, _ := c.Topic("payments"); p.Retention != 0 || p.RetentionBytes != 10<<30 {
		t.Errorf("payments = %+v", p)
	}
	s, ok := c.Subscription("payments", "ledger-writer")
	if !ok || s.Delivery != DeliveryCallback || s.DLQTopic() != "payments-dead" || s.MaxAttempts != DefaultMaxAttempts ||
		s.Breaker.MaxOpenTimeout != time.Minute || s.RedisUnavailable != RedisDeliver {
		t.Errorf("payments/ledger-writer = %+v, %v", s, ok)
	}
	if s, _ := c.Subscription("orders", "email-workers"); s.DLQTopic() != "orders.dlq.email-workers" {
		t.Errorf("default DLQ = %q", s.DLQTopic())
	}
	var names []string
	for _, t := range c.AllTopics() {
		names = append(names, t.Name)
	}
	if want := []string{"orders", "payments", "orders.dlq.email-workers", "payments-dead"}; !reflect.DeepEqual(names, want) {
		t.Errorf("AllTopics = %v, want %v", names, want)
	}
}

// The example must mention every field, so that it stays the full reference.
func TestExampleHasEveryField(t *testing.T) {
	data, err := os.ReadFile("testdata/spool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for name, ft := range yamlFields(ty) {
			if !strings.Contains(string(data), name+":") {
				t.Errorf("testdata/spool.yaml lacks %s", name)
			}
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft)
			}
		}
	}
	walk(reflect.TypeFor[Config]())
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte("node: {data_dir: /d}\ntopics: [{name: a}]\nsubscriptions: [{topic: a, group: g}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Node.DataDir = "/d"
	want.Topics = []TopicConfig{NewTopic("a", 0)}
	want.Subscriptions = []SubscriptionConfig{NewSubscription("a", "g")}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", *c, want)
	}
	if c.Topics[0].Retention != DefaultRetention || c.Topics[0].Partitions != DefaultPartitions {
		t.Errorf("topic defaults = %+v", c.Topics[0])
	}
}

func TestParseEmptyNeedsDataDir(t *testing.T) {
	_, err := Parse([]byte("# nothing\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "node.data_dir" {
		t.Fatalf("Parse(empty) = %v, want node.data_dir required", err)
	}
	if _, err := Parse([]byte("node: {dev: true}\n")); err != nil {
		t.Fatalf("dev without data_dir: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // all must appear
	}{
		{"unknown top-level", "nodes: {}\n", []string{"line 1", "nodes", "unknown field", "did you mean node?"}},
		{"unknown nested, every one reported",
			"node:\n  data_dri: /d\nsubscriptions:\n  - topic: a\n    group: g\n    backof: {base: 1s}\n    breaker: {windw: 1s}\n",
			[]string{"line 2: node.data_dri: unknown field (did you mean data_dir?)", "line 6: subscriptions[0].backof: unknown field (did you mean backoff?)",
				"line 7: subscriptions[0].breaker.windw", "the fields here are"}},
		{"duration without unit", "node: {data_dir: /d, drain_timeout: 30}\n", []string{"line 1", "node.drain_timeout", "30 is not a duration", "30s"}},
		{"bare zero duration", "topics:\n  - name: a\n    retention: 0\n", []string{"line 3", "topics[0].retention", "0s"}},
		{"bad duration", "storage: {fsync_interval: 5 seconds}\n", []string{"storage.fsync_interval", "5 seconds"}},
		{"wrong type", "topics: [{name: a, partitions: eight}]\n", []string{"config:", "line 1", "eight"}},
		{"syntax", "node: [\n", []string{"config:", "yaml"}},
		{"two documents", "node: {data_dir: /d}\n---\nnode: {data_dir: /e}\n", []string{"more than one YAML document"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "spool.yaml")
	if err := os.WriteFile(p, []byte("node: {data_dir: /d, dev: true, devv: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("Load = %v, want the path and the line", err)
	}
	if err := os.WriteFile(p, []byte("node: {data_dir: [}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = Load(p); err == nil || !strings.HasPrefix(err.Error(), "config: "+p+": yaml:") {
		t.Fatalf("Load(bad yaml) = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v", err)
	}
}

func TestMergeKeys(t *testing.T) {
	y := `
defaults: &d {max_attempts: 3, ordering: none}
`
	// An unknown top-level anchor holder is still an unknown field.
	if _, err := Parse([]byte(y)); err == nil {
		t.Fatal("unknown field 'defaults' accepted")
	}
	y = `
node: {data_dir: /d}
topics: [{name: a}]
subscriptions:
  - &s {topic: a, group: g1, max_attempts: 3, ordering: none}
  - <<: *s
    group: g2
`
	c, err := Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.Subscription("a", "g2"); !ok || s.MaxAttempts != 3 || s.Ordering != OrderNone {
		t.Fatalf("merged subscription = %+v %v", s, ok)
	}
}
