package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReadMetricsBounded: a page over maxMetricsBytes (a 63 MiB page
// once took 982 MB to parse) is refused with an error that says so, and
// what was read stays bounded.
func TestReadMetricsBounded(t *testing.T) {
	line := "spool_publish_messages_total{topic=\"orders\",x=\"" + strings.Repeat("y", 200) + "\"} 1\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range (64 << 20) / len(line) {
			if _, err := w.Write([]byte(line)); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readMetrics(ctx, srv.URL)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "over 8 MiB") {
		t.Fatalf("readMetrics = %v, want a refusal naming the limit", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 400<<20 {
		t.Errorf("reading allocated %d MiB", got>>20)
	}
}
