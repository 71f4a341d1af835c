package deliver

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// gateLedger blocks Release calls until their gate opens and records the
// order in which calls start and end.
type gateLedger struct {
	ledger.Ledger
	gate chan struct{}
	mu   sync.Mutex
	log  []string
}

func (l *gateLedger) note(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *gateLedger) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.log...)
}

func (l *gateLedger) Release(ctx context.Context, group string, ttl time.Duration, items []ledger.Release) error {
	l.note("release start " + items[0].ID)
	select {
	case <-l.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := l.Ledger.Release(ctx, group, ttl, items)
	l.note("release end " + items[0].ID)
	return err
}

func (l *gateLedger) Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, claims []ledger.Claim) ([]ledger.ClaimResult, error) {
	l.note("claim " + claims[0].ID)
	return l.Ledger.Claim(ctx, group, owner, now, ttl, claims)
}

func startPipeline(t *testing.T, led ledger.Ledger) (*mailbox[ledgerOp], chan *claimJob) {
	return startPipelineDelay(t, led, 0)
}

func startPipelineDelay(t *testing.T, led ledger.Ledger, writeDelay time.Duration) (*mailbox[ledgerOp], chan *claimJob) {
	t.Helper()
	in := newMailbox[ledgerOp]()
	answers := make(chan *claimJob, 16)
	pl := &pipeline{led: led, group: "g", owner: "n1", log: discardLogger(), in: in, answers: func(j *claimJob) { answers <- j }, writeDelay: writeDelay}
	ctx, cancel := context.WithCancel(context.Background())
	finish := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); pl.run(ctx, finish) }()
	t.Cleanup(func() { close(finish); cancel(); <-done })
	return in, answers
}

func claimOf(s *sub, id string) *claimJob {
	d := tracker.Delivery[engine.Record]{Value: engine.Record{ID: []byte(id)}, Deadline: time.Now().Add(time.Minute)}
	return &claimJob{s: s, now: time.Now(), cands: []candidate{{s: s, d: d}}}
}

// Settlements and claims of different messages overlap: a claim does not
// wait for the round trip of an unrelated settlement (the ordered pipeline
// took turns and cost e2e-ledger a fifth of its throughput), while a claim
// of the same message still waits until its settlement is written.
func TestPipelineOrdersOnlyWhatMustBeOrdered(t *testing.T) {
	led := &gateLedger{Ledger: ledger.NewMemory(nil), gate: make(chan struct{})}
	in, answers := startPipeline(t, led)
	s := &sub{cfg: Subscription{DedupeTTL: time.Hour}}
	// Grant a and b, then release a (blocked at the gate).
	in.put(ledgerOp{claim: claimOf(s, "a")})
	in.put(ledgerOp{claim: claimOf(s, "b")})
	ja, jb := <-answers, <-answers
	if ja.err != nil || jb.err != nil {
		t.Fatal(ja.err, jb.err)
	}
	in.put(ledgerOp{s: s, ops: ledgerOps{release: []ledger.Release{{ID: "a", Token: ja.res[0].Token, Uncount: true}}}})
	// A claim of c must not wait for a's release.
	in.put(ledgerOp{claim: claimOf(s, "c")})
	select {
	case j := <-answers:
		if j.err != nil {
			t.Fatal(j.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the claim of c waited for the unrelated release of a: %v", led.events())
	}
	// A claim of a must wait until a's release is written.
	in.put(ledgerOp{claim: claimOf(s, "a")})
	select {
	case j := <-answers:
		t.Fatalf("the claim of a was answered (%v) before a's release was written: %v", j.err, led.events())
	case <-time.After(100 * time.Millisecond):
	}
	close(led.gate)
	j := <-answers
	if j.err != nil {
		t.Fatal(j.err)
	}
	if j.res[0].Attempts != 1 {
		t.Fatalf("attempts after an uncounted release: %d, want 1", j.res[0].Attempts)
	}
	ev := led.events()
	last := ev[len(ev)-1]
	if last != "claim a" || ev[len(ev)-2] != "release end a" {
		t.Fatalf("calls %v: the second claim of a must come after a's release ended", ev)
	}
}

// countLedger counts Complete calls and the messages they carry.
type countLedger struct {
	ledger.Ledger
	mu    sync.Mutex
	calls []int
}

func (l *countLedger) Complete(ctx context.Context, group string, ttl time.Duration, items []ledger.Finish) error {
	l.mu.Lock()
	l.calls = append(l.calls, len(items))
	l.mu.Unlock()
	return l.Ledger.Complete(ctx, group, ttl, items)
}

func (l *countLedger) completes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.calls...)
}

// claimAll claims ids through the pipeline and returns their tokens.
func claimAll(t *testing.T, in *mailbox[ledgerOp], answers chan *claimJob, s *sub, ids ...string) map[string]uint64 {
	t.Helper()
	tokens := map[string]uint64{}
	for _, id := range ids {
		in.put(ledgerOp{claim: claimOf(s, id)})
		j := <-answers
		if j.err != nil || j.res[0].Status != ledger.Granted {
			t.Fatalf("claim of %s: %v %+v", id, j.err, j.res)
		}
		tokens[id] = j.res[0].Token
	}
	return tokens
}

// Settlements handed over one at a time within the write delay reach the
// ledger in one call: at a moderate rate each frame's few acks made a
// script call of their own, and the call is what costs.
func TestPipelineGathersWritesWithinTheDelay(t *testing.T) {
	led := &countLedger{Ledger: ledger.NewMemory(nil)}
	in, answers := startPipelineDelay(t, led, 300*time.Millisecond)
	s := &sub{cfg: Subscription{DedupeTTL: time.Hour}}
	ids := []string{"a", "b", "c", "d"}
	tokens := claimAll(t, in, answers, s, ids...)
	start := time.Now()
	for _, id := range ids {
		in.put(ledgerOp{s: s, ops: ledgerOps{complete: []ledger.Finish{{ID: id, Token: tokens[id]}}}})
		time.Sleep(10 * time.Millisecond) // sleep-ok: acks arriving apart, as frames do (the gap is what is gathered)
	}
	await(t, 10*time.Second, "a complete call", func() bool { return len(led.completes()) > 0 })
	if got := led.completes(); len(got) != 1 || got[0] != len(ids) {
		t.Fatalf("complete calls %v, want one call of %d", got, len(ids))
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("written after %v, before the write delay of 300ms", waited)
	}
}

// A claim of a message whose settlement is being gathered does not wait
// out the write delay: the writer is told to write at once, and the claim
// still comes after the settlement.
func TestPipelineClaimHurriesAGatheredWrite(t *testing.T) {
	led := &gateLedger{Ledger: ledger.NewMemory(nil), gate: make(chan struct{})}
	close(led.gate)
	in, answers := startPipelineDelay(t, led, time.Hour)
	s := &sub{cfg: Subscription{DedupeTTL: time.Hour}}
	tokens := claimAll(t, in, answers, s, "a")
	in.put(ledgerOp{s: s, ops: ledgerOps{release: []ledger.Release{{ID: "a", Token: tokens["a"], Uncount: true}}}})
	in.put(ledgerOp{claim: claimOf(s, "a")})
	select {
	case j := <-answers:
		if j.err != nil || j.res[0].Status != ledger.Granted {
			t.Fatalf("second claim of a: %v %+v", j.err, j.res)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the claim of a waited for the write delay of its release: %v", led.events())
	}
	ev := led.events()
	if len(ev) < 2 || ev[len(ev)-1] != "claim a" || ev[len(ev)-2] != "release end a" {
		t.Fatalf("calls %v: the second claim of a must come after a's release", ev)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
