package log

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// forEachOption runs f once per storage option combination: fsync mode
// (always, always with the journal, interval) × segment size
// (small/large) × index interval (small/large).
func forEachOption(t *testing.T, f func(t *testing.T, o Options)) {
	t.Helper()
	for _, mode := range []string{"always", "journal", "interval"} {
		for _, seg := range []int64{2 << 10, 64 << 20} {
			for _, idx := range []int{64, 1 << 10} {
				o := Options{SegmentBytes: seg, IndexIntervalBytes: idx, FsyncInterval: 5 * time.Millisecond, Logger: quietLogger()}
				switch mode {
				case "journal":
					o.Journal = true
				case "interval":
					o.Fsync = FsyncInterval
				}
				t.Run(fmt.Sprintf("fsync=%s/seg=%d/idx=%d", mode, seg, idx), func(t *testing.T) { f(t, o) })
			}
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.UnixMilli(1_700_000_000_000)} }
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// harness is an open Store with Run going in the background.
type harness struct {
	t      testing.TB
	dir    string
	o      Options
	s      *Store
	cancel context.CancelFunc
	done   chan error
}

func openHarness(t testing.TB, dir string, o Options) *harness {
	t.Helper()
	h := &harness{t: t, dir: dir, o: o}
	h.start()
	t.Cleanup(func() {
		if h.s != nil {
			h.close()
		}
	})
	return h
}

func (h *harness) start() {
	h.t.Helper()
	s, err := OpenStore(h.dir, h.o)
	if err != nil {
		h.t.Fatalf("OpenStore: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h.s, h.cancel, h.done = s, cancel, done
	// The goroutine sends on its own channel: reading h.done when Run returns
	// could hand this Run's result to a later start's waiter.
	go func() { done <- s.Run(ctx) }()
}

// stop ends Run without closing the store (as a crash would).
func (h *harness) stop() {
	if h.done == nil {
		return
	}
	h.cancel()
	<-h.done
	h.done = nil
}

// resume starts Run again after stop, on the same store.
func (h *harness) resume() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h.cancel, h.done = cancel, done
	go func() { done <- h.s.Run(ctx) }()
}

func (h *harness) close() {
	h.stop()
	if err := h.s.Close(); err != nil {
		h.t.Errorf("Close: %v", err)
	}
	h.s = nil
}

func (h *harness) reopen() {
	h.t.Helper()
	h.close()
	h.start()
}

func (h *harness) part(name string) *Partition {
	h.t.Helper()
	p, err := h.s.Partition(name)
	if err != nil {
		h.t.Fatalf("Partition(%s): %v", name, err)
	}
	return p
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// genRecords makes n records for batch number b with values of size vsize.
func genRecords(b, n, vsize int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		v := bytes.Repeat([]byte{byte('a' + (b+i)%26)}, vsize)
		recs[i] = Record{Timestamp: 1_700_000_000_000 + int64(b), ID: []byte(fmt.Sprintf("id-%d-%d", b, i)), Key: []byte(fmt.Sprintf("k%d", i%7)), Value: v}
		if i%3 == 0 {
			recs[i].Headers = []Header{{Key: "h", Value: []byte{byte(i)}}}
		}
	}
	return recs
}

// readAllRecords reads [from, upTo) in steps of maxBytes.
func readAllRecords(t testing.TB, p *Partition, from, upTo int64, maxBytes int) []Record {
	t.Helper()
	var out []Record
	for off := from; off < upTo; {
		recs, err := p.Read(off, maxBytes, upTo, nil)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if len(recs) == 0 {
			t.Fatalf("Read(%d) returned nothing below %d", off, upTo)
		}
		for _, r := range recs {
			if r.Offset != off {
				t.Fatalf("got offset %d, want %d", r.Offset, off)
			}
			off++
		}
		out = append(out, recs...)
	}
	return out
}

func sameRecord(a, b Record) bool {
	if a.Timestamp != b.Timestamp || !bytes.Equal(a.ID, b.ID) || !bytes.Equal(a.Key, b.Key) ||
		!bytes.Equal(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}
