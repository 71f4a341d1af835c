package metrics

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every metric the code defines is documented in docs/metrics.md, and the
// page lists nothing the code does not define.
func TestDocsListEveryMetric(t *testing.T) {
	m := New()
	var code []string
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" {
			continue
		}
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch((<-ch).String())
		code = append(code, name[1])
	}
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, mm := range regexp.MustCompile("(?m)^\\| `(spool_[a-z_]+)`").FindAllStringSubmatch(string(b), -1) {
		docs = append(docs, mm[1])
	}
	slices.Sort(code)
	slices.Sort(docs)
	if !slices.Equal(code, docs) {
		t.Fatalf("docs/metrics.md and sidecar/metrics disagree:\ncode: %v\ndocs: %v", code, docs)
	}
}
