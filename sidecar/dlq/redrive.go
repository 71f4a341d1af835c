package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/ledger"
)

// Limits of a redrive.
const (
	// DefaultRatePerS paces a redrive when the request names no rate.
	DefaultRatePerS = 100
	// MaxRatePerS bounds the rate a request may ask for.
	MaxRatePerS = 10_000
	// MaxSample bounds the entries a redrive reports back.
	MaxSample = 100
	// DefaultPageEntries and DefaultPageBytes bound one page of a redrive:
	// the dead letters it holds in memory at a time (read, then reset and
	// appended one by one at the rate, then the next page). A single entry
	// larger than the page is a page on its own. One read from the log asks
	// for at most min(FetchBytes, page bytes).
	DefaultPageEntries = 256
	DefaultPageBytes   = 4 << 20
)

// Counters a redrive reports to (the sidecar passes its metrics). Nil
// functions are not called.
type Counters struct {
	Redriven func(n int)
	Skipped  func(reason string, n int)
	// Page, when set, is told the size of each page read (entries and
	// bytes held at once).
	Page func(entries, bytes int)
}

// Request is one redrive.
type Request struct {
	Group, Topic, DLQTopic string
	Filter                 *spoolv1.DeadLetterFilter
	DryRun                 bool
	RatePerS               int
	// PageEntries and PageBytes bound the dead letters held in memory at a
	// time; 0 means DefaultPageEntries and DefaultPageBytes.
	PageEntries, PageBytes int
	// Cursor goes on from where the previous call stopped ("" starts).
	Cursor string
	// Limit, when positive, ends the call after this many matching entries
	// or ScanRecords records read (0: ScanRecordsPerCall), with a cursor to
	// go on; 0 redrives every entry in one call.
	Limit       int
	ScanRecords int
}

// Result reports a redrive.
type Result struct {
	Matched, Redriven, AlreadyDone uint64
	Sample                         []*spoolv1.DeadLetter
	// NextCursor goes on where this call stopped; "" once every entry was
	// handled. Progress says how far the redrive is over all its calls.
	NextCursor string
	Progress   *spoolv1.ScanProgress
}

// Redrive moves the matching dead letters of req.Group back to their
// original partition, at most req.RatePerS per second. Each gets the
// header HeaderRedriveGroup (other groups skip it) and its ledger entry is
// reset; an entry the ledger shows as done is left alone (the message was
// handled: redriving it would be a mistake). With DryRun nothing moves and
// Result says what would. l may be nil (no ledger: nothing is reset).
//
// The dead-letter topic is read in pages (Request.PageEntries,
// PageBytes): memory is bounded by a page, not by the size of the topic.
// A page's appends are confirmed before the next page is read. Only the
// entries present when Redrive starts are considered. When it stops early
// (ctx, Redis, the log), Matched counts the entries seen so far.
func Redrive(ctx context.Context, eng Engine, l ledger.Ledger, req Request, c Counters) (res Result, err error) {
	rate := req.RatePerS
	if rate <= 0 {
		rate = DefaultRatePerS
	}
	rate = min(rate, MaxRatePerS)
	pageEntries, pageBytes := req.PageEntries, req.PageBytes
	if pageEntries <= 0 {
		pageEntries = DefaultPageEntries
	}
	if pageBytes <= 0 {
		pageBytes = DefaultPageBytes
	}
	budget := math.MaxInt
	if req.Limit > 0 {
		budget = scanBudget(req.ScanRecords)
	}
	q := Query{Group: req.Group, DLQTopic: req.DLQTopic, Topic: req.Topic, Filter: req.Filter, Cursor: req.Cursor}
	r, err := newReader(eng, q, min(FetchBytes, pageBytes), budget)
	if err != nil {
		return res, err
	}
	defer func() { res.NextCursor, res.Progress = r.cursor(), r.progress() }()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for ctx.Err() == nil {
		want := pageEntries
		if req.Limit > 0 {
			want = min(want, req.Limit-int(res.Matched))
		}
		if want <= 0 {
			return res, nil
		}
		page, err := r.next(want, pageBytes)
		if err != nil {
			return res, fmt.Errorf("redrive stopped after %d messages: %w", res.Redriven, err)
		}
		if len(page) == 0 {
			return res, nil
		}
		if c.Page != nil {
			size := 0
			for _, e := range page {
				size += e.size()
			}
			c.Page(len(page), size)
		}
		res.Matched += uint64(len(page))
		for _, e := range page[:min(len(page), MaxSample-len(res.Sample))] {
			res.Sample = append(res.Sample, e.dl)
		}
		if req.DryRun {
			continue
		}
		if err := redrivePage(ctx, eng, l, req, c, page, tick.C, &res); err != nil {
			return res, err
		}
	}
	if req.DryRun {
		return res, ctx.Err()
	}
	return res, fmt.Errorf("redrive stopped after %d messages: %w", res.Redriven, ctx.Err())
}

// redrivePage resets and appends the entries of one page, one per tick,
// and returns once every append of the page is confirmed.
func redrivePage(ctx context.Context, eng Engine, l ledger.Ledger, req Request, c Counters, page []entry, tick <-chan time.Time, res *Result) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var produceErr error
	defer wg.Wait() // the page's appends end before the page is let go
	for _, e := range page {
		select {
		case <-tick:
		case <-ctx.Done():
			return fmt.Errorf("redrive stopped after %d messages: %w", res.Redriven, ctx.Err())
		}
		id := string(e.rec.ID)
		if l != nil {
			rr, err := l.Reset(ctx, req.Group, []string{id})
			if err != nil {
				return fmt.Errorf("redrive: resetting the ledger entry of %s: %w (nothing more was moved; run the redrive again when Redis is back)", id, err)
			}
			if rr[0] == ledger.AlreadyDone {
				res.AlreadyDone++
				if c.Skipped != nil {
					c.Skipped("already_done", 1)
				}
				continue
			}
		}
		rec, part := redriveRecord(e, req)
		wg.Add(1)
		eng.Produce(req.Topic, part, []engine.Record{rec}, func(_ int64, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				produceErr = errors.Join(produceErr, err)
				mu.Unlock()
			}
		})
		res.Redriven++
		if c.Redriven != nil {
			c.Redriven(1)
		}
	}
	wg.Wait()
	if produceErr != nil {
		return fmt.Errorf("redrive: appending to %s: %w", req.Topic, produceErr)
	}
	return nil
}

// redriveRecord rebuilds the original message from a dead-letter entry.
func redriveRecord(e entry, req Request) (engine.Record, int32) {
	hdrs := make([]engine.Header, 0, len(e.rec.Headers)+2)
	for _, h := range e.rec.Headers {
		if !strings.HasPrefix(h.Key, "spool-") {
			hdrs = append(hdrs, h)
		}
	}
	hdrs = append(hdrs,
		engine.Header{Key: deliver.HeaderRedriveGroup, Value: []byte(req.Group)},
		engine.Header{Key: deliver.HeaderRedriveFrom, Value: []byte(req.DLQTopic + "/" + strconv.Itoa(int(e.dl.GetDlqPartition())) + "/" + strconv.FormatInt(e.dl.GetDlqOffset(), 10))},
	)
	return engine.Record{ID: e.rec.ID, Key: e.rec.Key, Value: e.rec.Value, Headers: hdrs}, e.dl.GetMessage().GetPartition()
}
