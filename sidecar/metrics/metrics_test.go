package metrics

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolmq/spool/internal/buildinfo"
)

// Every metric the code defines is documented in docs/metrics.md, and the
// page lists nothing the code does not define.
func TestDocsListEveryMetric(t *testing.T) {
	m := New()
	var code []string
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" || v.Type().Field(i).Name == "Cluster" { // Cluster: the fields it holds
			continue
		}
		ch := make(chan *prometheus.Desc, 16) // a collector may describe several (LogSyncs)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			code = append(code, regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1])
		}
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

// The cluster metrics are brought up to date by each scrape, not before:
// what the refresh sets is what that scrape reads.
func TestClusterMetricsRefreshOnScrape(t *testing.T) {
	m := New()
	refreshes := 0
	m.Cluster.Refresh(func() {
		refreshes++
		m.ClusterNodes.WithLabelValues().Set(float64(refreshes))
	})
	if refreshes != 0 {
		t.Fatalf("refreshed %d times before any scrape", refreshes)
	}
	for want := 1.0; want <= 2; want++ {
		got := gathered(t, m, "spool_cluster_nodes")
		if got != want {
			t.Fatalf("scrape %v: spool_cluster_nodes = %v, want %v (the value this scrape's refresh set)", want, got, want)
		}
	}
}

func gathered(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}

// The outcomes a metric's help names are the ones docs/metrics.md names for
// it: Prometheus shows the help next to the series, so a value listed in
// one and not the other misleads whoever builds a query or an alert on it.
func TestOutcomeHelpMatchesDocs(t *testing.T) {
	m := New()
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	helps := map[string]string{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" || v.Type().Field(i).Name == "Cluster" { // Cluster: the fields it holds
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for desc := range ch {
			d := desc.String()
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d)
			help := regexp.MustCompile(`help: "([^"]*)"`).FindStringSubmatch(d)
			helps[name[1]] = help[1]
		}
	}
	checked := 0
	for name, help := range helps {
		_, list, ok := strings.Cut(help, "by outcome: ")
		if !ok {
			continue
		}
		list, _, _ = strings.Cut(list, ".")
		var inHelp []string
		for _, item := range strings.Split(list, ", ") {
			inHelp = append(inHelp, regexp.MustCompile(`^[a-z_]+`).FindString(strings.TrimSpace(item)))
		}
		row := regexp.MustCompile("(?m)^\\| `" + name + "` \\|.*$").FindString(string(b))
		if row == "" {
			t.Errorf("%s: no row in docs/metrics.md", name)
			continue
		}
		var inDocs []string
		for _, mm := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row, -1) {
			if mm[1] != name && !strings.HasPrefix(mm[1], "spool_") && mm[1] != "outcome" {
				inDocs = append(inDocs, mm[1])
			}
		}
		slices.Sort(inHelp)
		slices.Sort(inDocs)
		if !slices.Equal(inHelp, inDocs) {
			t.Errorf("%s: its help names the outcomes %v, docs/metrics.md names %v", name, inHelp, inDocs)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no metric's help lists its outcomes: the check checks nothing")
	}
}

// /metrics says which release this spoold is: spool_build_info is 1 with its
// version, commit and Go version.
func TestBuildInfo(t *testing.T) {
	mfs, err := New().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "spool_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": buildinfo.Version, "commit": buildinfo.Commit(), "go_version": buildinfo.GoVersion()}
		if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 || !reflect.DeepEqual(labels, want) {
			t.Fatalf("spool_build_info: %v, want one series of 1 labelled %v", mf.GetMetric(), want)
		}
		return
	}
	t.Fatal("no spool_build_info")
}
