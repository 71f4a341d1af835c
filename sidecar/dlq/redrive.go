package dlq

import (
	"context"
	"errors"
	"fmt"
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
)

// Counters a redrive reports to (the sidecar passes its metrics).
type Counters struct {
	Redriven func(n int)
	Skipped  func(reason string, n int)
}

// Request is one redrive.
type Request struct {
	Group, Topic, DLQTopic string
	Filter                 *spoolv1.DeadLetterFilter
	DryRun                 bool
	RatePerS               int
}

// Result reports a redrive.
type Result struct {
	Matched, Redriven, AlreadyDone uint64
	Sample                         []*spoolv1.DeadLetter
}

// Redrive moves the matching dead letters of req.Group back to their
// original partition, at most req.RatePerS per second. Each gets the
// header HeaderRedriveGroup (other groups skip it) and its ledger entry is
// reset; an entry the ledger shows as done is left alone (the message was
// handled: redriving it would be a mistake). With DryRun nothing moves and
// Result says what would. l may be nil (no ledger: nothing is reset).
func Redrive(ctx context.Context, eng Engine, l ledger.Ledger, req Request, c Counters) (Result, error) {
	rate := req.RatePerS
	if rate <= 0 {
		rate = DefaultRatePerS
	}
	rate = min(rate, MaxRatePerS)
	var matched []entry
	err := scan(eng, req.Group, req.DLQTopic, req.Filter, func(e entry) bool {
		if e.dl.GetMessage().GetTopic() == req.Topic {
			matched = append(matched, e)
		}
		return ctx.Err() == nil
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Matched: uint64(len(matched))}
	for _, e := range matched[:min(len(matched), MaxSample)] {
		res.Sample = append(res.Sample, e.dl)
	}
	if req.DryRun || len(matched) == 0 {
		return res, ctx.Err()
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var produceErr error
	for _, e := range matched {
		select {
		case <-tick.C:
		case <-ctx.Done():
			wg.Wait()
			return res, fmt.Errorf("redrive stopped after %d of %d messages: %w", res.Redriven, res.Matched, ctx.Err())
		}
		id := string(e.rec.ID)
		if l != nil {
			rr, err := l.Reset(ctx, req.Group, []string{id})
			if err != nil {
				wg.Wait()
				return res, fmt.Errorf("redrive: resetting the ledger entry of %s: %w (nothing more was moved; run the redrive again when Redis is back)", id, err)
			}
			if rr[0] == ledger.AlreadyDone {
				res.AlreadyDone++
				c.Skipped("already_done", 1)
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
		c.Redriven(1)
	}
	wg.Wait()
	if produceErr != nil {
		return res, fmt.Errorf("redrive: appending to %s: %w", req.Topic, produceErr)
	}
	return res, nil
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
