package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ledgerCounters are spoold's ledger counters, scraped from its /metrics at
// the end of a run.
type ledgerCounters struct {
	DedupeHits   int64 // spool_dedupe_hits_total: deliveries the ledger found done, acked without the app
	LedgerErrors int64 // spool_ledger_errors_total, summed over op
	Undeduped    int64 // spool_undeduped_deliveries_total: deliveries made without a ledger check
}

func (lc *ledgerCounters) add(o ledgerCounters) {
	lc.DedupeHits += o.DedupeHits
	lc.LedgerErrors += o.LedgerErrors
	lc.Undeduped += o.Undeduped
}

// scrapeLedgerCounters reads spoold's /metrics on its admin port.
func scrapeLedgerCounters(adminAddr string) (ledgerCounters, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		return ledgerCounters{}, fmt.Errorf("loadtest: scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ledgerCounters{}, fmt.Errorf("loadtest: scrape /metrics: %s", resp.Status)
	}
	sums, err := sumMetrics(resp.Body, "spool_dedupe_hits_total", "spool_ledger_errors_total", "spool_undeduped_deliveries_total")
	if err != nil {
		return ledgerCounters{}, err
	}
	return ledgerCounters{
		DedupeHits:   sums["spool_dedupe_hits_total"],
		LedgerErrors: sums["spool_ledger_errors_total"],
		Undeduped:    sums["spool_undeduped_deliveries_total"],
	}, nil
}

// sumMetrics sums, for each name, the samples of that metric over all its
// label sets in a Prometheus text exposition. A metric with no sample (a
// counter vector never incremented) sums to 0.
func sumMetrics(r io.Reader, names ...string) (map[string]int64, error) {
	want := make(map[string]bool, len(names))
	sums := make(map[string]int64, len(names))
	for _, n := range names {
		want[n] = true
		sums[n] = 0
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// name{labels} value [timestamp], or name value [timestamp].
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if !want[name] {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			// Label values may hold spaces and braces, quoted: cut at the last '}'.
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				return nil, fmt.Errorf("loadtest: /metrics: bad line %q", line)
			}
			rest = rest[j+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("loadtest: /metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("loadtest: /metrics: bad value in %q", line)
		}
		sums[name] += int64(math.Round(v))
	}
	return sums, sc.Err()
}
