package check

import (
	"encoding/json"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/spoolmq/spool/sidecar/metrics"
)

// exported returns every series name spoold's /metrics can carry: the
// names registered by sidecar/metrics (the Go and process collectors
// included), with _bucket, _sum and _count for its histograms.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 1024)
	m.Registry.Describe(ch)
	close(ch)
	for d := range ch {
		names[fq.FindStringSubmatch(d.String())[1]] = true
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		h, ok := v.Field(i).Interface().(*prometheus.HistogramVec)
		if !ok {
			continue
		}
		dc := make(chan *prometheus.Desc, 1)
		h.Describe(dc)
		base := fq.FindStringSubmatch((<-dc).String())[1]
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[base+s] = true
		}
	}
	if !names["spool_lag_seconds"] || !names["spool_handle_latency_seconds_bucket"] || names["spool_lag_seconds_bucket"] {
		t.Fatalf("the registry does not read as expected: %d names", len(names))
	}
	return names
}

// grafanaVars stands in for Grafana's variables so that a query parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// queried parses a PromQL expression and returns the metric names it
// selects.
func queried(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sel := range parser.ExtractSelectors(e) {
		for _, m := range sel {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				out = append(out, m.Value)
			}
		}
	}
	return out, nil
}

func checkQuery(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	got, err := queried(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	if len(got) == 0 {
		t.Errorf("%s: %q selects no metric by name", where, expr)
	}
	for _, n := range got {
		if !names[n] {
			t.Errorf("%s: %q queries %s, which spoold does not export (docs/metrics.md lists what it does)", where, expr, n)
		}
	}
}

// The alert rules parse with Prometheus's own rule parser (the one
// promtool uses) and query only metrics spoold exports.
func TestRulesParseAndQueryRealMetrics(t *testing.T) {
	names := exported(t)
	groups, errs := rulefmt.ParseFile("../prometheus/rules.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.Fatal("no rule groups")
	}
	n := 0
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			alerts[r.Alert] = true
			checkQuery(t, g.Name+"/"+r.Alert+r.Record, r.Expr, names)
		}
	}
	for _, want := range []string{"SpoolPartitionsUnderReplicated", "SpoolDurableWritesSlow", "SpoolLagGrowing"} {
		if !alerts[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
	t.Logf("%d rules", n)
}

// The dashboard is JSON Grafana can load, and every query of it (panels
// and variables) names metrics spoold exports.
func TestDashboardQueriesRealMetrics(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile("../grafana/spool-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string                   `json:"type"`
			Title   string                   `json:"title"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&dash); err != nil {
		t.Fatal(err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Error("the dashboard needs a title and a uid")
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-z_:]+),\s*[a-z_]+\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil || !names[m[1]] {
			t.Errorf("variable %s: %q is not label_values of a metric spoold exports", v.Name, v.Definition)
		}
	}
	queries := 0
	covered := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no query or no size", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			checkQuery(t, "panel "+p.Title, tg.Expr, names)
			got, _ := queried(tg.Expr)
			for _, n := range got {
				covered[n] = true
			}
		}
	}
	// What issue 14 asks the dashboard to show.
	for _, want := range []string{"spool_lag_messages", "spool_lag_seconds", "spool_publish_messages_total", "spool_settlements_total",
		"spool_dead_lettered_total", "spool_breaker_state", "spool_ledger_available", "spool_cluster_partitions_under_replicated",
		"spool_handle_latency_seconds_bucket", "spool_publish_latency_seconds_bucket"} {
		if !covered[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
	var missing []string
	for n := range names {
		if strings.HasPrefix(n, "spool_") && !covered[n] && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	t.Logf("%d queries; spool metrics on no panel: %v", queries, missing)
}

// The autoscaling examples scale on metrics spoold exports.
func TestAutoscalingQueriesRealMetrics(t *testing.T) {
	names := exported(t)
	for _, o := range readManifests(t, "../autoscaling/*.yaml") {
		m, ok := o.obj.(map[string]any)
		if !ok {
			continue
		}
		spec, _ := m["spec"].(map[string]any)
		triggers, _ := spec["triggers"].([]any)
		if len(triggers) == 0 {
			t.Errorf("%s: no triggers", o.source)
		}
		for _, tr := range triggers {
			md, _ := tr.(map[string]any)["metadata"].(map[string]any)
			q, _ := md["query"].(string)
			checkQuery(t, o.source, q, names)
		}
	}
}
