package deliver

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// switchLedger is a ledger that fails every call while down is set.
type switchLedger struct {
	ledger.Ledger
	down atomic.Bool
}

func (l *switchLedger) Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, claims []ledger.Claim) ([]ledger.ClaimResult, error) {
	if l.down.Load() {
		return nil, ledger.ErrUnavailable
	}
	return l.Ledger.Claim(ctx, group, owner, now, ttl, claims)
}

func (l *switchLedger) Complete(ctx context.Context, group string, ttl time.Duration, items []ledger.Finish) error {
	if l.down.Load() {
		return ledger.ErrUnavailable
	}
	return l.Ledger.Complete(ctx, group, ttl, items)
}

// logRecorder keeps the messages logged at each level.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *logRecorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// Item 15: a ledger outage is logged when it starts and when it ends, not
// once per retry (it was a WARN every 500 ms per subscription). Real time:
// under synctest's exact timers the retry lands exactly on its deadline and
// the old code's "now.After(retryAt)" never fired twice.
func TestLedgerOutageLogsStateChanges(t *testing.T) {
	func() {
		eng := newTestEngine()
		eng.publish(tTopic, 0, msg("m-1", []byte("hello")))
		led := &switchLedger{Ledger: ledger.NewMemory(nil)}
		led.down.Store(true)
		rec := &logRecorder{}
		h := startGroupLogging(t, eng, GroupConfig{Ledger: led, Subscriptions: []Subscription{testSub(tracker.Config{})}}, slog.New(rec))
		c := h.join(10, 10)
		time.Sleep(3 * time.Second) // sleep-ok: the outage must last several retry periods (500 ms each)
		if n := c.frame(0); n != nil {
			t.Fatalf("a delivery went out while the ledger was down (policy pause): %v", n)
		}
		if n := rec.count("WARN ledger unavailable"); n != 1 {
			t.Fatalf("%d WARN lines for one 3 s outage, want 1 (when it starts)", n)
		}
		led.down.Store(false)
		d := c.deliveries(1, time.Minute)[0]
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(d)}}})
		// The loop publishes its log lines after the round that sent the
		// delivery: the line may follow it by a moment.
		await(t, 10*time.Second, "the INFO line of the ledger's return", func() bool { return rec.count("INFO ledger available again") >= 1 })
		if n := rec.count("INFO ledger available again"); n != 1 {
			t.Fatalf("%d INFO lines when the ledger came back, want 1; log: %v", n, rec.lines())
		}
	}()
}
