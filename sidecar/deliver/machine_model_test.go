package deliver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// The machine's model test, in the style of sidecar/tracker/model_test.go:
// rapid draws every interleaving of events — records appended, consumers
// joining and leaving, credit, acks, retries, releases, dead letters (with
// right and stale tokens), frames that cannot be queued, ledger answers,
// dead-letter publishes that succeed or fail, commits, time passing — and
// a dumb model checks every action the machine emits:
//
//   - no delivery beyond a consumer's credit or max in flight, no frame over
//     its byte bound;
//   - the attempt number the app sees is 1 + the failures that count
//     (retries, lease expiries, streams closed): a RELEASE, a frame that
//     could not be sent, never count; attempts never exceed max_attempts;
//   - no claim of a message is emitted while a settlement of it is not yet
//     handed to the ledger pipeline (the pipeline then keeps that order);
//   - committed offsets never move backwards;
//   - at the end (no more failures, every delivery acked) every message
//     was acked or dead-lettered and the committed offset reaches the end;
//   - all of this with fault injection on too (duplicates, lost acks,
//     delays: faults.go), which never counts an attempt.

type mConsumer struct {
	c           *consumer
	granted     int // credit granted minus credit returned by unsent frames
	received    int // deliveries received
	outstanding map[refKey]*spoolv1.Delivery
}

type mMsg struct {
	id       string
	counted  int  // failures that count
	finished bool // acked (or acked late) or dead-lettered
	dead     bool // dead-letter published
	acked    bool
}

type modelTest struct {
	t         *rapid.T
	mc        *machine
	led       ledger.Ledger
	maxAtt    int
	now       time.Time
	log       [][]engine.Record
	msgs      map[string]*mMsg
	consumers []*mConsumer
	pipeline  []ledgerOp
	dls       []*dlqJob
	commits   []*commitJob
	committed map[int32]int64 // last Next emitted per partition
	// asyncReads: reads are answered later, in any order across
	// partitions, as the readers of a broker backend answer them; reads
	// holds those not yet answered.
	asyncReads bool
	reads      []pendingRead
	// unwritten: ids with a settlement the machine accepted and not yet
	// handed to the ledger pipeline.
	unwritten map[string]bool
	chaos     bool
}

const modelParts = 2

func newModelTest(t *rapid.T) *modelTest {
	useLedger := rapid.Bool().Draw(t, "ledger")
	tc := tracker.Config{
		Ordering:          tracker.Ordering(rapid.IntRange(0, 2).Draw(t, "ordering")),
		MaxAttempts:       rapid.IntRange(1, 4).Draw(t, "maxAttempts"),
		WindowMessages:    rapid.IntRange(2, 12).Draw(t, "window"),
		VisibilityTimeout: 5 * time.Second,
		Rand:              func() float64 { return 0.5 },
	}
	tc.MaxInFlight = rapid.IntRange(1, tc.WindowMessages).Draw(t, "maxInFlight")
	tc.Backoff.Base = time.Second
	tc.Backoff.Max = 2 * time.Second
	sc := testSub(tc)
	if rapid.Bool().Draw(t, "faults") {
		// Fault injection (faults.go), its draws from the machine's own
		// seeded generator. Early lease expiries are left out: the model
		// knows leases from the deadlines the app is told.
		sc.Faults = &Faults{Duplicate: 0.3, LoseAck: 0.3, Delay: 0.3, DelayMax: 2 * time.Second, Seed: rapid.Uint64().Draw(t, "seed")}
	}
	cfg := GroupConfig{Name: tGroup, Subscriptions: []Subscription{sc}, CommitInterval: time.Second,
		DLQMaxInFlight: rapid.IntRange(1, 3).Draw(t, "dlqMaxInFlight"),
		// The memory budget: smaller than one message, a few messages, or
		// ample (the model's records are at most ~1 KiB plus the ring).
		MemoryBytes: rapid.SampledFrom([]int64{1, 2 << 10, 16 << 10, 1 << 20}).Draw(t, "memoryBytes")}
	var led ledger.Ledger
	if useLedger {
		led = ledger.NewMemory(nil)
		cfg.Ledger, cfg.Owner = led, "node-1"
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	mc := &machine{cfg: cfg, byTop: map[string]*sub{}, expired: map[refKey]sent{},
		bud: memBudget{limit: cfg.MemoryBytes}}
	s, err := mc.newSub(cfg.Subscriptions[0], 1, make([]int64, modelParts), nil)
	if err != nil {
		t.Fatal(err)
	}
	mc.subs = []*sub{s}
	mc.byTop[tTopic] = s
	return &modelTest{t: t, mc: mc, led: led, maxAtt: cfg.Subscriptions[0].Tracker.MaxAttempts, now: time.Unix(1_000_000, 0),
		log: make([][]engine.Record, modelParts), msgs: map[string]*mMsg{}, committed: map[int32]int64{},
		unwritten: map[string]bool{}, chaos: true, asyncReads: rapid.Bool().Draw(t, "asyncReads")}
}

// round is the driver's loop body: reads, then work, carrying out actions.
func (x *modelTest) round() {
	x.mc.fetches(x.now)
	x.drive()
	x.mc.work(x.now)
	x.drive()
}

func (x *modelTest) drive() {
	for len(x.mc.acts) > 0 {
		acts := x.mc.take(nil)
		for i := range acts {
			x.do(&acts[i])
		}
	}
}

func (x *modelTest) consumerOf(c *consumer) *mConsumer {
	for _, mcn := range x.consumers {
		if mcn.c == c {
			return mcn
		}
	}
	x.t.Fatalf("action for a consumer that left")
	return nil
}

func (x *modelTest) do(a *action) {
	t := x.t
	switch a.kind {
	case actFetch:
		for _, r := range x.reads {
			if r.a.p == a.p {
				t.Fatalf("partition %d: a read from %d emitted while the read from %d is under way", a.p.num, a.offset, r.a.offset)
			}
		}
		if x.asyncReads {
			// The broker answers with the log as of now; the answer
			// reaches the machine later.
			x.reads = append(x.reads, pendingRead{a: *a, end: len(x.log[a.p.num])})
			return
		}
		x.answerRead(a, len(x.log[a.p.num]))
	case actSend:
		mcn := x.consumerOf(a.c)
		ds := a.frame.GetDeliveries()
		if len(ds) == 0 {
			for _, e := range a.frame.GetSettleErrors() {
				if e.GetReason() != "NOT_IN_FLIGHT" && e.GetReason() != "STALE_FENCING_TOKEN" {
					t.Fatalf("unexpected settle error %v", e)
				}
			}
			return
		}
		bytes := 0
		for _, d := range ds {
			bytes += wireBytes(d)
		}
		if len(ds) > 1 && bytes > a.c.maxFrameBytes {
			t.Fatalf("frame of %d deliveries, %d bytes > limit %d", len(ds), bytes, a.c.maxFrameBytes)
		}
		if x.chaos && rapid.IntRange(0, 9).Draw(t, "unsent") == 0 {
			mcn.granted -= len(ds) // their credit comes back
			x.mc.frameUnsent(x.now, a.c, a.frame)
			for _, d := range ds {
				if x.led != nil {
					x.unwritten[d.GetMessageId()] = true // an uncounted release
				}
			}
			mcn.granted += len(ds)
			return
		}
		for _, d := range ds {
			m := x.msgs[d.GetMessageId()]
			if m.finished {
				t.Fatalf("%s delivered after it was finished", m.id)
			}
			if want := 1 + m.counted; int(d.GetAttempt()) != want {
				t.Fatalf("%s delivered as attempt %d, want %d (1 + %d counted failures)", m.id, d.GetAttempt(), want, m.counted)
			}
			if int(d.GetAttempt()) > x.maxAtt {
				t.Fatalf("%s: attempt %d > max_attempts %d", m.id, d.GetAttempt(), x.maxAtt)
			}
			mcn.received++
			mcn.outstanding[refKey{d.GetTopic(), d.GetPartition(), d.GetOffset()}] = d
		}
		if mcn.received > mcn.granted {
			t.Fatalf("consumer received %d deliveries with %d credit", mcn.received, mcn.granted)
		}
		if len(mcn.outstanding) > a.c.maxInFlight {
			t.Fatalf("consumer holds %d > max in flight %d", len(mcn.outstanding), a.c.maxInFlight)
		}
	case actClaim:
		for _, cd := range a.claim.cands {
			if id := string(cd.d.Value.ID); x.unwritten[id] {
				t.Fatalf("claim of %s emitted before its settlement was handed to the ledger", id)
			}
		}
		x.pipeline = append(x.pipeline, ledgerOp{claim: a.claim})
	case actLedgerWrite:
		for _, f := range a.writes.complete {
			delete(x.unwritten, f.ID)
		}
		for _, r := range a.writes.release {
			delete(x.unwritten, r.ID)
		}
		x.pipeline = append(x.pipeline, ledgerOp{s: a.s, ops: a.writes})
	case actDeadLetter:
		x.dls = append(x.dls, a.dl)
		if len(x.dls) > x.mc.cfg.DLQMaxInFlight {
			t.Fatalf("%d dead letters in flight > %d", len(x.dls), x.mc.cfg.DLQMaxInFlight)
		}
	case actCommit:
		for p, pos := range a.pos {
			if pos.Next < x.committed[p] {
				t.Fatalf("partition %d: committed offset moved back from %d to %d", p, x.committed[p], pos.Next)
			}
			x.committed[p] = pos.Next
		}
		x.commits = append(x.commits, &commitJob{s: a.s, pos: a.pos})
	}
}

// pendingRead is a read under way (async reads) and the log's end when
// the broker read it.
type pendingRead struct {
	a   action
	end int
}

// answerRead answers a read with what the log held up to end from its
// offset on.
func (x *modelTest) answerRead(a *action, end int) {
	var recs []engine.Record
	for o := a.offset; o < int64(end) && len(recs) < 3; o++ {
		recs = append(recs, x.log[a.p.num][o])
	}
	x.mc.fetched(x.now, a.s, a.p, a.offset, recs, nil)
}

// readStep answers one read under way (async reads), the oldest or, with
// chaos, any.
func (x *modelTest) readStep() {
	if len(x.reads) == 0 {
		return
	}
	i := 0
	if x.chaos {
		i = rapid.IntRange(0, len(x.reads)-1).Draw(x.t, "read")
	}
	r := x.reads[i]
	x.reads = append(x.reads[:i], x.reads[i+1:]...)
	x.answerRead(&r.a, r.end)
	x.drive()
}

// pipelineStep carries out the oldest ledger op, as the pipeline does.
func (x *modelTest) pipelineStep() {
	if len(x.pipeline) == 0 {
		return
	}
	op := x.pipeline[0]
	x.pipeline = x.pipeline[1:]
	pl := &pipeline{led: x.led, group: tGroup, owner: "node-1"}
	ctx := context.Background()
	if op.claim != nil {
		pl.claim(ctx, op.claim)
		if op.claim.err != nil {
			x.t.Fatal(op.claim.err)
		}
		x.mc.claimed(x.now, op.claim)
		if x.mc.claimsInFlight < 0 {
			x.t.Fatalf("claims in flight %d after an answer: an answer counted twice", x.mc.claimsInFlight)
		}
		return
	}
	if err := pl.write(ctx, &op); err != nil {
		x.t.Fatal(err)
	}
}

func (x *modelTest) publish() {
	p := int32(rapid.IntRange(0, modelParts-1).Draw(x.t, "partition"))
	off := len(x.log[p])
	id := fmt.Sprintf("m-%d-%d", p, off)
	key := rapid.SampledFrom([]string{"", "a", "b"}).Draw(x.t, "key")
	size := rapid.IntRange(0, 200).Draw(x.t, "size")
	x.log[p] = append(x.log[p], engine.Record{ID: []byte(id), Key: []byte(key), Value: make([]byte, size), Offset: int64(off)})
	x.msgs[id] = &mMsg{id: id}
	x.mc.dataChanged() // the engine's Watch signal
}

func (x *modelTest) join() {
	maxInFlight := rapid.IntRange(1, 6).Draw(x.t, "consumerMaxInFlight")
	c := newConsumer(fmt.Sprint("c", len(x.consumers)), ModeStream, nil, maxInFlight)
	c.maxFrameBytes = rapid.IntRange(800, 2000).Draw(x.t, "frameBytes")
	x.consumers = append(x.consumers, &mConsumer{c: c, outstanding: map[refKey]*spoolv1.Delivery{}})
	x.mc.join(c)
}

func (x *modelTest) leave() {
	if len(x.consumers) == 0 {
		return
	}
	i := rapid.IntRange(0, len(x.consumers)-1).Draw(x.t, "leaver")
	mcn := x.consumers[i]
	for _, d := range mcn.outstanding {
		x.msgs[d.GetMessageId()].counted++ // a stream that closes counts an attempt
		if x.led != nil {
			x.unwritten[d.GetMessageId()] = true
		}
	}
	x.consumers = append(x.consumers[:i], x.consumers[i+1:]...)
	x.mc.leave(x.now, mcn.c)
}

func (x *modelTest) credit(mcn *mConsumer, n int) {
	mcn.granted += n
	x.mc.settle(x.now, mcn.c, &spoolv1.SubscribeRequest{Credit: uint32(n)})
}

// settle answers one outstanding delivery (or sends a stale answer).
func (x *modelTest) settle(outcome int) {
	var live []*mConsumer
	for _, mcn := range x.consumers {
		if len(mcn.outstanding) > 0 {
			live = append(live, mcn)
		}
	}
	if len(live) == 0 {
		return
	}
	mcn := rapid.SampledFrom(live).Draw(x.t, "settler")
	// Map order is random: draw from the sorted keys instead, so that a
	// failing run replays.
	keys := make([]refKey, 0, len(mcn.outstanding))
	for kk := range mcn.outstanding {
		keys = append(keys, kk)
	}
	sortKeys(keys)
	k := rapid.SampledFrom(keys).Draw(x.t, "ref")
	d := mcn.outstanding[k]
	ref := refOf(d)
	if rapid.IntRange(0, 9).Draw(x.t, "stale") == 0 {
		ref.FencingToken++ // refused: nothing changes
		x.mc.settle(x.now, mcn.c, &spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: ref}}})
		return
	}
	delete(mcn.outstanding, k)
	m := x.msgs[d.GetMessageId()]
	req := &spoolv1.SubscribeRequest{}
	switch outcome {
	case 0:
		req.Acks = []*spoolv1.Ack{{Ref: ref}}
		m.finished, m.acked = true, true
		if x.led != nil {
			x.unwritten[m.id] = true
		}
	case 1:
		req.Nacks = []*spoolv1.Nack{{Ref: ref, Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: "boom"}}
		m.counted++
		if x.led != nil {
			x.unwritten[m.id] = true
		}
	case 2:
		req.Nacks = []*spoolv1.Nack{{Ref: ref, Outcome: spoolv1.Outcome_OUTCOME_RELEASE}}
		if x.led != nil {
			x.unwritten[m.id] = true
		}
	case 3:
		req.Nacks = []*spoolv1.Nack{{Ref: ref, Outcome: spoolv1.Outcome_OUTCOME_DEAD_LETTER, Reason: "bad"}}
		m.counted = x.maxAtt // never delivered again
	}
	lost := metricKey{id: metFaultsInjected, l1: tTopic, l2: string(faultLoseAck)}
	before := x.mc.obs.counts[lost]
	x.mc.settle(x.now, mcn.c, req)
	if x.mc.obs.counts[lost] > before {
		// The ack was lost (fault injection): the message is delivered
		// again, uncounted, and its release is written to the ledger.
		m.finished, m.acked = false, false
	}
}

func sortKeys(ks []refKey) {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && (ks[j].part < ks[j-1].part || ks[j].part == ks[j-1].part && ks[j].offset < ks[j-1].offset); j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}

// advance moves time on: leases that end count an attempt — also those of
// deliveries still waiting for the ledger's answer (the app never saw
// them, but their lease ended; the ledger counts the takeover).
func (x *modelTest) advance(d time.Duration) {
	x.now = x.now.Add(d)
	for _, op := range x.pipeline {
		if op.claim == nil {
			continue
		}
		for i := range op.claim.cands {
			cd := &op.claim.cands[i]
			if cd.wire == 0 && !x.now.Before(cd.d.Deadline) {
				cd.wire = 1 // counted once (wire is set again by the answer)
				x.msgs[string(cd.d.Value.ID)].counted++
			}
		}
	}
	for _, mcn := range x.consumers {
		for k, dl := range mcn.outstanding {
			if x.now.UnixMilli() >= dl.GetLeaseDeadlineMs() {
				delete(mcn.outstanding, k)
				x.msgs[dl.GetMessageId()].counted++
			}
		}
	}
}

func (x *modelTest) answerDL(ok bool) {
	if len(x.dls) == 0 {
		return
	}
	i := 0
	if x.chaos {
		i = rapid.IntRange(0, len(x.dls)-1).Draw(x.t, "dl")
	}
	j := x.dls[i]
	x.dls = append(x.dls[:i], x.dls[i+1:]...)
	if !ok {
		j.err = fmt.Errorf("disk full")
	} else {
		m := x.msgs[j.id]
		if m.dead {
			x.t.Fatalf("%s dead-lettered twice", j.id)
		}
		m.dead, m.finished = true, true
	}
	x.mc.deadLettered(x.now, j)
}

func (x *modelTest) answerCommit() {
	if len(x.commits) == 0 {
		return
	}
	j := x.commits[0]
	x.commits = x.commits[1:]
	x.mc.committedPositions(j)
}

func (x *modelTest) step() {
	t := x.t
	switch rapid.IntRange(0, 13).Draw(t, "event") {
	case 0, 1:
		x.publish()
	case 2:
		x.join()
	case 3:
		x.leave()
	case 4:
		if len(x.consumers) > 0 {
			x.credit(rapid.SampledFrom(x.consumers).Draw(t, "creditTo"), rapid.IntRange(1, 4).Draw(t, "credit"))
		}
	case 5, 6:
		x.settle(rapid.IntRange(0, 3).Draw(t, "outcome"))
	case 7:
		x.pipelineStep()
	case 8:
		x.answerDL(rapid.IntRange(0, 3).Draw(t, "dlOK") > 0)
	case 9:
		x.answerCommit()
	case 10, 11:
		x.advance(time.Duration(rapid.IntRange(0, 3000).Draw(t, "ms")) * time.Millisecond)
	case 12, 13:
		x.readStep()
	}
	x.round()
}

// finish stops the chaos and runs until every message is finished.
func (x *modelTest) finish() {
	x.chaos = false
	if len(x.consumers) == 0 {
		x.join()
		x.round()
	}
	for range 2000 {
		for _, mcn := range x.consumers {
			if mcn.granted-mcn.received < 4 {
				x.credit(mcn, 4)
			}
			for len(mcn.outstanding) > 0 {
				x.settle(0)
			}
		}
		for len(x.pipeline) > 0 {
			x.pipelineStep()
		}
		for len(x.dls) > 0 {
			x.answerDL(true)
		}
		for len(x.commits) > 0 {
			x.answerCommit()
		}
		for len(x.reads) > 0 {
			x.readStep()
		}
		x.advance(time.Second)
		x.round()
		if x.done() {
			return
		}
	}
	for id, m := range x.msgs {
		if !m.finished {
			x.t.Fatalf("%s lost: never acked nor dead-lettered (counted %d)", id, m.counted)
		}
	}
	x.t.Fatalf("committed %v, log ends at %d/%d", x.committed, len(x.log[0]), len(x.log[1]))
}

func (x *modelTest) done() bool {
	for _, m := range x.msgs {
		if !m.finished {
			return false
		}
	}
	for p := range x.log {
		if x.committed[int32(p)] != int64(len(x.log[p])) {
			return false
		}
	}
	return len(x.pipeline) == 0 && len(x.dls) == 0
}

func TestMachineModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x := newModelTest(t)
		n := rapid.IntRange(1, 150).Draw(t, "steps")
		for range n {
			x.step()
		}
		x.finish()
	})
}
