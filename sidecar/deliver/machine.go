package deliver

import (
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/schedule"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// machine is the decision logic of one consumer group: a pure state machine
// in the style of sidecar/tracker. It owns the trackers of every partition
// the group consumes, the breakers, the consumers' credit and outstanding
// deliveries, dead letters waiting to be published and the positions to
// commit. It has no goroutines, no clock, no channels and does no I/O:
// events come in as method calls (with the current time), and the work to
// do comes out as actions appended to m.acts, which the driver (Group.Run)
// carries out, feeding the answers back as events.
//
// Metrics and log lines are observations, not decisions: the machine keeps
// them as data (observe.go), and the driver publishes them after each round.
type machine struct {
	cfg GroupConfig
	obs observations // counted and said since the driver last published (observe.go)

	subs  []*sub
	byTop map[string]*sub
	// cluster: a coordinator shares the partitions among the group's
	// members (member.go); false: every partition is this sidecar's.
	cluster bool

	consumers      []*consumer
	draining       bool
	dlqInFlight    int
	claimsInFlight int // claim batches emitted and not yet answered
	nextCommit     time.Time
	// dlWait: dead letters taken from trackers and not yet published (at
	// most DLQMaxInFlight are published at a time).
	dlWait  []pendingDL
	delBuf  []tracker.Delivery[engine.Record]
	candBuf []candidate
	evBuf   []tracker.Event
	dlBuf   []tracker.DeadLetter[engine.Record]
	// expired holds deliveries whose lease ended (and are not yet
	// redelivered): a late ack for them is still applied.
	expired map[refKey]sent
	// fenced holds deliveries outstanding when their partition stopped
	// because the member was fenced (fence.go): an ack of one still
	// completes it in the ledger.
	fenced map[refKey]fencedDelivery
	// ledgerRetryAt: while the ledger is unavailable under policy pause,
	// nothing is delivered before this time.
	ledgerRetryAt time.Time

	// bud bounds the bytes the group holds (budget.go); dlBytes is what
	// the dead letters being published hold beyond their windows.
	bud     memBudget
	dlBytes int64
	waitBuf []*part
	activeN int // delivering partitions, counted once per round (0: not yet)
	// fetchRound numbers the rounds of fetches: each partition asks once.
	fetchRound uint64
	// dataSeq counts the engine's signals that partitions of the group's
	// topics grew (dataChanged): a partition whose last read found its end
	// is read again only after one.
	dataSeq uint64
	// pausedSeen is the budget's paused total already counted in the metric.
	pausedSeen time.Duration
	// nextLag: when gauges are refreshed next (snapshot.go); lagging: the
	// lag prober has a round it has not answered.
	nextLag time.Time
	lagging bool

	acts []action // output of the current event
}

// actionKind says what the driver must do.
type actionKind uint8

const (
	// actFetch: read partition p of s from offset, up to maxBytes; answer
	// with machine.fetched.
	actFetch actionKind = iota + 1
	// actSend: queue frame for consumer c; if it cannot be queued, answer
	// with machine.frameUnsent.
	actSend
	// actClaim: send claim to the ledger pipeline; answer with
	// machine.claimed.
	actClaim
	// actLedgerWrite: send writes to the ledger pipeline (no answer: the
	// pipeline writes them in order and retries).
	actLedgerWrite
	// actDeadLetter: produce dl.rec to the dead-letter topic; answer with
	// machine.deadLettered.
	actDeadLetter
	// actCommit: write positions of s; answer with machine.committedPositions
	// (machine.committedCluster in a cluster).
	actCommit
	// actConnected: the consumers changed; the membership driver reads
	// which subscriptions have one (machine.connected) and yields the
	// others' partitions. No answer.
	actConnected
	// actTrace: hand trace to the Tail streams following s's topic
	// (dropped for one that is not reading). No answer.
	actTrace
	// actSpan: record span, one delivery attempt, with the group's Tracer
	// (emitted only when tracing is on). No answer.
	actSpan
	// actGauges: refresh the gauges of the group's in-memory state, and,
	// when lag is set, have the lag prober read those partitions' ends
	// (off the loop); answer with machine.lagged once it has.
	actGauges
)

// action is one piece of work for the driver. Ledger work (claims and
// writes) must reach the ledger in the order the actions were emitted.
type action struct {
	kind     actionKind
	s        *sub
	p        *part
	offset   int64
	maxBytes int
	c        *consumer
	frame    *spoolv1.SubscribeResponse
	// fenceAt: of an actSend of deliveries in a cluster, when their
	// member fences itself (queued.fenceAt).
	fenceAt time.Time
	claim   *claimJob
	writes  ledgerOps
	dl      *dlqJob
	pos     map[int32]engine.Position
	// In a cluster, an actCommit carries each partition's generation, and
	// may carry revoked partitions to hand over after the commit.
	gens      map[int32]uint64
	handovers []*handover
	trace     *spoolv1.TailDelivery
	span      *attemptSpan
	lag       []partProgress
	// reset: an actCommit that ends an offset reset (reset.go); the
	// driver answers its caller with the commit's result.
	reset *resetJob
}

func (m *machine) emit(a action) { m.acts = append(m.acts, a) }

// take returns the actions emitted since the last call, reusing dst.
func (m *machine) take(dst []action) []action {
	dst = append(dst[:0], m.acts...)
	clear(m.acts)
	m.acts = m.acts[:0]
	return dst
}

type sub struct {
	cfg      Subscription
	parts    []*part
	dlqParts int32
	// traced counts the admin Tail streams following this topic's
	// deliveries (trace.go): while above 0, each step is emitted.
	traced int

	committing bool // a commit of this topic is being written
	// joinedGen is the newest generation of the coordinator's views
	// applied (0: not a member).
	joinedGen uint64
	// sharedGens: the coordinator's generations are the group's, so a
	// partition granted to another member after this one was fenced is
	// granted in a higher generation than any this member held it in
	// (the coordinator's state machine, embedded and on JetStream). The
	// ledger claims then carry them. Kafka's views number each member's
	// own changes: not comparable between members, not carried.
	sharedGens bool
	// heardAt is when the last heartbeat (or join) the coordinator took
	// was sent: the member stops delivering at heardAt + the session
	// timeout (fence.go).
	heardAt time.Time
	brk     *breaker.Set // nil: no breakers configured
	// Degradation (cluster, member.go): since when the breakers have held
	// the deliveries (zero: they do not), whether the member says it is
	// degraded, and since when it has owned no partition while degraded.
	heldSince, idleSince time.Time
	degraded             bool
	// groupConsumers: the apps connected to every sidecar of the group that
	// take the topic, as the coordinator's last view summed its members'
	// counts (cluster only; Snapshot).
	groupConsumers int
	// probePending: the probe was taken and waits for the ledger's answer.
	probePending bool
	ledger       ledgerOps // ledger writes not yet handed to the pipeline
	// ledgerDownSince: when claims began failing (zero while the ledger
	// answers); the outage is logged at its start and end only.
	ledgerDownSince time.Time
	// Observations since the driver last published them (observe.go):
	// counters, and the handle latencies of settlements (seconds).
	stats     [numStats]float64
	latencies []float64
	// metrics: the driver's metric handles for the topic (report.go),
	// set by Group.newSub; the machine only hands the pointer on.
	metrics *subMetrics
	// faults: the subscription's fault injection (faults.go); nil: none.
	faults *faulter
}

type part struct {
	num     int32
	tr      *tracker.Tracker[engine.Record]
	fetchAt int64 // next offset to fetch
	// skip holds offsets restored as finished above the committed offset,
	// ascending; fetch leaves them out, position() keeps reporting them until
	// the committed offset passes them. skipAt is the first not yet fetched past.
	skip   []int64
	skipAt int
	// committed is the last position written.
	committed engine.Position
	// wire maps offsets to the ledger's fencing token of their last grant.
	wire map[int64]uint64
	// history holds the failed attempts of unfinished messages.
	history map[int64][]AttemptRecord
	// avgRecordBytes sizes reads to the room in the window.
	avgRecordBytes int
	// ahead holds records read and not yet in the window (it had no room
	// for that many messages), from fetchAt on: they go to the tracker as
	// the window makes room, and no read is made while any wait, so no
	// record is read twice. They alias their read's buffer; aheadBytes is
	// what they hold, charged to the memory budget like the window.
	ahead      []engine.Record
	aheadBytes int64
	// batchBytes is the size of the last read that came back larger than
	// its grant: one log batch, which a read returns whole. The partition's
	// reads wait for that much room (within its fair share), so that what
	// a read returns fits its grant.
	batchBytes int64
	// grant is the memory budget's room for the read under way;
	// budgetWait: the partition waits for room (memBudget.waiting).
	grant grant
	// reading: a read of the partition is under way (emitted, not yet
	// answered by fetched). No other read of it is made meanwhile, so its
	// reads come back in order. On the embedded log of one node the driver
	// answers at once; on a broker backend, or a cluster, a read is a round
	// trip made on the group's readers while delivery goes on.
	reading bool
	readSeq uint64 // dataSeq when the read under way was made
	// endAt, endSeq: the last read, from endAt, found the end of the
	// partition while dataSeq was endSeq: it is not read again from there
	// until the engine signals new data. retryAt: a read failed; the next
	// one waits until then.
	endAt      int64
	endSeq     uint64
	retryAt    time.Time
	budgetWait bool
	fetchRound uint64 // the last round of fetches that asked for it

	// In a cluster (member.go): whether this member owns the partition,
	// the generation to stamp its commits with, when a revocation's drain
	// ends, whether its handover is under way, and its incarnation (grows
	// with every new tracker, so that late answers about an earlier one
	// are recognised). coordPos is the group's committed position as the
	// coordinator last showed it (lag, the admin API). dlPending counts
	// its dead letters taken from the tracker and not yet answered.
	own      ownState
	gen      uint64
	revokeBy time.Time
	handing  bool
	// handoverAt: after a handover that failed or was answered "not
	// revoking" while this member's view still says revoking, the next
	// attempt waits until then (handoverRetry) instead of following at
	// once, again and again, until the next view arrives.
	handoverAt time.Time
	inc        uint64
	coordPos   engine.Position
	dlPending  int
}

// newSub builds a subscription's state from what the engine reported:
// partition count, the dead-letter topic's partition count, each
// partition's log start and the committed positions.
func (m *machine) newSub(sc Subscription, dlqParts int32, starts []int64, pos map[int32]engine.Position) (*sub, error) {
	s := &sub{cfg: sc, dlqParts: dlqParts, faults: newFaulter(sc.Faults)}
	if sc.Breaker != nil {
		brk, err := breaker.NewSet(*sc.Breaker)
		if err != nil {
			return nil, err
		}
		s.brk = brk
	}
	for i, start := range starts {
		p := int32(i)
		committed := pos[p]
		next := max(committed.Next, start)
		tr, err := tracker.New[engine.Record](sc.Tracker, next)
		if err != nil {
			return nil, err
		}
		pt := &part{num: p, tr: tr, fetchAt: next, endAt: -1, committed: committed, avgRecordBytes: 1024}
		for _, o := range committed.Done {
			if o >= next {
				pt.skip = append(pt.skip, o)
			}
		}
		s.parts = append(s.parts, pt)
	}
	return s, nil
}

func (m *machine) lookup(topic string, partition int32) (*sub, *part) {
	s := m.byTop[topic]
	if s == nil || partition < 0 || int(partition) >= len(s.parts) {
		return s, nil
	}
	return s, s.parts[partition]
}

// fetches emits a read for every partition whose tracker has room.
func (m *machine) fetches(now time.Time) {
	if m.draining {
		return
	}
	m.bud.begin(now, m.heldBytes(), m.heldRecords())
	m.activeN = 0
	m.fetchRound++
	// Partitions waiting for memory first, oldest first (budget.go: fairness).
	m.waitBuf = m.bud.waiters(m.waitBuf)
	for _, p := range m.waitBuf {
		s := m.subOf(p)
		if s == nil || s.paused(now) || !m.delivering(p) {
			m.bud.forget(now, p)
			continue
		}
		p.fetchRound = m.fetchRound
		m.fetchPart(now, s, p)
	}
	clear(m.waitBuf)
	for _, s := range m.subs {
		if s.paused(now) {
			continue
		}
		for _, p := range s.parts {
			if m.delivering(p) && p.fetchRound != m.fetchRound {
				m.fetchPart(now, s, p)
			}
		}
	}
	m.gauge(metricKey{id: metMemory}, float64(m.bud.held))
	if d := m.bud.pausedTotal - m.pausedSeen; d > 0 {
		m.count(metricKey{id: metMemoryPaused}, d.Seconds())
		m.pausedSeen = m.bud.pausedTotal
	}
}

// subOf returns the subscription p belongs to.
func (m *machine) subOf(p *part) *sub {
	for _, s := range m.subs {
		if int(p.num) < len(s.parts) && s.parts[p.num] == p {
			return s
		}
	}
	return nil
}

// heldBytes is what the group holds now: every partition's window (records
// and ring) and records read ahead of it, and the dead letters being
// published.
func (m *machine) heldBytes() int64 {
	n := m.dlBytes
	for _, s := range m.subs {
		for _, p := range s.parts {
			n += p.heldBytes()
		}
	}
	return n
}

// heldRecords counts the records the group holds: in its windows, read
// ahead of them, and dead letters being published.
func (m *machine) heldRecords() int {
	n := m.dlqInFlight
	for _, s := range m.subs {
		for _, p := range s.parts {
			n += p.tr.Window() + len(p.ahead)
		}
	}
	return n
}

// heldBytes is what the partition holds: its window (records and ring),
// the records read ahead of it, and the room reserved for its read under
// way (a round of fetches starts from what the group holds).
func (p *part) heldBytes() int64 { return p.tr.HeldBytes() + p.aheadBytes + p.grant.bytes }

// dropAhead forgets the records read ahead of the window (the partition
// starts over, or stops delivering): fetchAt is the first of them, so
// they are read again if they are wanted.
func (p *part) dropAhead() { p.ahead, p.aheadBytes = nil, 0 }

// activeParts counts the partitions delivering now (the budget's fair share).
func (m *machine) activeParts() int {
	n := 0
	for _, s := range m.subs {
		for _, p := range s.parts {
			if m.delivering(p) {
				n++
			}
		}
	}
	return n
}

func (m *machine) fetchPart(now time.Time, s *sub, p *part) {
	if p.reading {
		return // one read at a time: its answer calls again
	}
	if p.fetchAt == p.endAt && p.endSeq == m.dataSeq || now.Before(p.retryAt) {
		// At the end (nothing new since), or a failed read waits: reading
		// again now would find the same (on readers, a busy loop of reads).
		m.bud.forget(now, p)
		return
	}
	want := p.tr.Wants()
	if len(p.ahead) > 0 {
		// Records already read go first; nothing more is read while
		// any wait (they are charged already: no grant needed).
		if want > 0 {
			m.fill(now, s, p)
		}
		if len(p.ahead) > 0 {
			m.bud.forget(now, p)
			return
		}
		want = p.tr.Wants()
	}
	// Refill in large steps (a quarter of the window), unless the tracker is
	// running dry: a read returns whole log batches, so reading for a
	// handful of records would decode a batch to hold most of it ahead.
	dry := p.tr.Pending()-p.tr.Scheduled() == 0 // scheduled messages waiting for their time do not feed the app
	if want <= 0 || (want < p.tr.Config().WindowMessages/4 && !dry) {
		m.bud.forget(now, p)
		return
	}
	if m.activeN == 0 {
		m.activeN = m.activeParts()
	}
	// The memory budget: room for this read, the same large steps unless
	// the partition runs dry. A read keeps every record it returns, and
	// returns at least one whole log batch: wait for room for one (as big
	// as the last read that outgrew its grant), unless the batch is more
	// than the partition's fair share or than its window can take — then
	// the read outgrows its grant by at most that batch.
	wantBytes := int64(want) * (int64(p.avgRecordBytes) + 2*p.tr.EntryBytes())
	minUseful := int64(minFetchBytes)
	if dry {
		minUseful = 1
	}
	minUseful = max(minUseful, min(p.batchBytes, m.bud.fairShare(m.activeN), wantBytes))
	g := m.bud.ask(now, p, p.heldBytes(), m.activeN, minUseful, wantBytes)
	if !g.ok() {
		return
	}
	p.grant, p.reading, p.readSeq = g, true, m.dataSeq
	// Read about as many bytes as the tracker has room for: the records kept
	// alias the read buffer, so an oversized read would pin memory well
	// beyond the window.
	maxBytes := max(min(m.cfg.FetchMaxBytes, max(want*p.avgRecordBytes, minFetchBytes), int(min(g.bytes, 1<<30))), 1)
	m.emit(action{kind: actFetch, s: s, p: p, offset: p.fetchAt, maxBytes: maxBytes})
}

// dataChanged: the engine signalled that partitions of the group's topics
// grew. Those found at their end are read again.
func (m *machine) dataChanged() { m.dataSeq++ }

// readRetryWait is how long a partition waits after a failed read.
const readRetryWait = 500 * time.Millisecond

// wantsData reports whether some partition has room for records: the
// driver waits for the engine's notification only then.
func (m *machine) wantsData() bool {
	if m.draining || m.bud.full() {
		return false
	}
	for _, s := range m.subs {
		for _, p := range s.parts {
			if m.delivering(p) && p.tr.Wants() > 0 {
				return true
			}
		}
	}
	return false
}

// fetched applies the answer to an actFetch: records read from offset (or
// the error). It may emit the next read of the same partition.
func (m *machine) fetched(now time.Time, s *sub, p *part, offset int64, recs []engine.Record, err error) {
	// Settle the read's reservation in the memory budget: what the records
	// kept hold is charged below.
	g := p.grant
	p.grant, p.reading = grant{}, false
	defer func() { m.bud.settle(g) }()
	if offset != p.fetchAt || m.draining || !m.delivering(p) {
		// An answer to a read made before a reset, or that came back once
		// the partition stopped delivering here (revoked, or the group
		// drains): its records are read again if they are wanted.
		return
	}
	var oor *engine.OffsetOutOfRangeError
	if errors.As(err, &oor) && p.fetchAt < oor.Start {
		// Retention deleted records the group had not finished.
		lost := oor.Start - p.fetchAt
		m.count(metricKey{id: metExpiredUnread, l1: s.cfg.Topic}, float64(lost))
		m.note(slog.LevelError, "records expired before the group finished them (lag exceeded retention)",
			"topic", s.cfg.Topic, "partition", p.num, "from", p.fetchAt, "to", oor.Start)
		p.fetchAt = oor.Start
		m.fetchPart(now, s, p)
		return
	}
	if err != nil {
		p.retryAt = now.Add(readRetryWait)
		m.note(slog.LevelError, "fetch failed; retrying shortly", "topic", s.cfg.Topic, "partition", p.num, "offset", p.fetchAt, "retry_in", readRetryWait, "err", err)
		return
	}
	if len(recs) == 0 {
		p.endAt, p.endSeq = offset, p.readSeq
		return
	}
	p.avgRecordBytes = recordBytes(recs)
	// Every record read is kept: in the window as far as it has room, the
	// rest ahead of it. The read returned whole log batches, which may be
	// more than its grant: its first batch always comes whole. Dropping
	// what did not fit would read that batch again for every grant (issue
	// 10: 2.5× the bytes delivered, with 16 KiB messages); keeping it is
	// charged in full, and the partition's next reads wait for room for a
	// batch that size (fetchPart).
	var readBytes int64
	for i := range recs {
		readBytes += storedBytes(&recs[i])
	}
	if readBytes > g.bytes {
		p.batchBytes = readBytes
	}
	p.ahead, p.aheadBytes = recs, readBytes
	m.bud.use(readBytes)
	m.bud.settle(g)
	g = grant{}
	m.fetchPart(now, s, p) // into the window; the next read, if it has room
}

// fill moves records read ahead into the window, as many as it has room
// for, leaving out offsets finished before a restart and messages not for
// this group (redriven to another); the rest stay ahead.
func (m *machine) fill(now time.Time, s *sub, p *part) {
	want := p.tr.Wants()
	before := p.heldBytes()
	batch := make([]tracker.Record[engine.Record], 0, min(len(p.ahead), want))
	var took, kept int64 // bytes taken from ahead, bytes of the records kept
	n := 0
	for n < len(p.ahead) && len(batch) < want {
		r := p.ahead[n]
		n++
		c := storedBytes(&r)
		took += c
		p.fetchAt = r.Offset + 1
		for p.skipAt < len(p.skip) && p.skip[p.skipAt] < r.Offset {
			p.skipAt++
		}
		if p.skipAt < len(p.skip) && p.skip[p.skipAt] == r.Offset {
			p.skipAt++
			continue // finished before the restart
		}
		if id, ok := schedule.CancelOf(&r); ok {
			// A cancel record (docs/scheduling.md) is finished here without
			// delivery, and so is the scheduled message it names if that
			// still waits for its time.
			cancelScheduled(now, p, batch, id)
			p.skip = slices.Insert(p.skip, p.skipAt, r.Offset)
			p.skipAt++
			continue
		}
		if !m.admit(&r) {
			// Not for this group (a message redriven to another group):
			// finished here without delivery.
			p.skip = slices.Insert(p.skip, p.skipAt, r.Offset)
			p.skipAt++
			continue
		}
		at, _ := schedule.Of(&r)
		batch = append(batch, tracker.Record[engine.Record]{Offset: r.Offset, Key: string(r.Key), Value: r, Bytes: c, NotBefore: at, InKeyOrder: !at.IsZero() && schedule.InKeyOrder(&r)})
		kept += c
	}
	if n == len(p.ahead) {
		p.dropAhead() // frees the slice; the buffer lives while the window holds its records
	} else {
		p.ahead, p.aheadBytes = p.ahead[n:], p.aheadBytes-took
	}
	if k := len(batch); k > 0 && k < n/2 && len(p.ahead) == 0 {
		// Most of what was taken is left out: copy the few records kept,
		// so that the read buffer they alias can be freed.
		compact(batch)
	} else if k > 0 {
		// The records alias the read buffer, which lives as long as any of
		// them: the last one kept is charged for those left out.
		batch[k-1].Bytes += took - kept
	}
	if err := p.tr.Add(now, batch...); err != nil {
		// Cannot happen: offsets increase and batch ≤ Wants. Stop feeding
		// this partition loudly rather than deliver out of order.
		m.note(slog.LevelError, "tracker refused records", "topic", s.cfg.Topic, "partition", p.num, "err", err)
		p.dropAhead()
	}
	m.bud.use(p.heldBytes() - before)
}

// cancelScheduled cancels the scheduled message id of partition p that
// waits for its time: in the window, or among the records about to join it.
func cancelScheduled(now time.Time, p *part, batch []tracker.Record[engine.Record], id string) {
	for i := range batch {
		if b := &batch[i]; b.NotBefore.After(now) && string(b.Value.ID) == id {
			b.Cancelled = true
		}
	}
	p.tr.CancelScheduled(now, func(v *engine.Record) bool { return string(v.ID) == id }, nil)
}

// minFetchBytes is the smallest read: a few records, to amortize the call.
const minFetchBytes = 16 << 10

// storedBytes estimates what one fetched record holds in memory: its bytes
// and their framing in the read buffer.
func storedBytes(r *engine.Record) int64 {
	n := len(r.ID) + len(r.Key) + len(r.Value) + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return int64(n)
}

// recordBytes estimates the stored size of one record of recs.
func recordBytes(recs []engine.Record) int {
	total := 0
	for i := range recs {
		r := &recs[i]
		total += len(r.ID) + len(r.Key) + len(r.Value) + 32
		for _, h := range r.Headers {
			total += len(h.Key) + len(h.Value) + 4
		}
	}
	return max(total/len(recs), 64)
}

// compact copies the bytes of the records kept into one buffer of their
// own, so that the read buffer they alias (mostly records not kept) can be
// freed: memory held stays proportional to the window, not to the reads.
func compact(batch []tracker.Record[engine.Record]) {
	n := 0
	for i := range batch {
		r := &batch[i].Value
		n += len(r.ID) + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Value)
		}
	}
	buf := make([]byte, 0, n)
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	for i := range batch {
		r := &batch[i].Value
		r.ID, r.Key, r.Value = take(r.ID), take(r.Key), take(r.Value)
		if len(r.Headers) > 0 {
			hs := make([]engine.Header, len(r.Headers))
			for j, h := range r.Headers {
				hs[j] = engine.Header{Key: h.Key, Value: take(h.Value)}
			}
			r.Headers = hs
		}
	}
}

// admit decides whether a fetched record is for this group: a message
// redriven from a dead-letter topic is only for the group that dead-lettered
// it. (The ledger checks each delivery later, in claim.)
func (m *machine) admit(r *engine.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderRedriveGroup {
			return string(h.Value) == m.cfg.Name
		}
	}
	return true
}

// work is the machine's round after events and reads: lease expiries and
// due retries, deliveries to consumers with credit, dead letters, ledger
// writes and commits.
func (m *machine) work(now time.Time) {
	m.tick(now)
	m.flushLedger() // settlements before any claim that follows (ordered pipeline)
	if !m.draining {
		m.dispatch(now)
	}
	m.deadLetters(now)
	m.revocations(now)
	m.advanceBreakers(now)
	m.health(now)
	m.flushLedger()
	m.maybeCommit(now)
	m.gaugesDue(now)
}

// tick advances the trackers' clocks: lease expiries and due retries.
func (m *machine) tick(now time.Time) {
	m.selfFence(now)
	if len(m.fenced) > 0 {
		m.forgetFenced(now)
	}
	for _, s := range m.subs {
		for _, p := range s.parts {
			if d, ok := p.tr.NextDeadline(); !ok || d.After(now) {
				continue
			}
			m.evBuf = p.tr.Tick(now, m.evBuf[:0])
			for _, ev := range m.evBuf {
				if ev.Kind == tracker.EventLeaseExpired {
					s.stats[statLeaseExpiries]++
					o := m.forget(s, p, ev.Offset, ev.Token)
					if m.cfg.Tracer != nil && o.id != "" {
						m.span(now, s, p, ev.Offset, o, nil, OutcomeLeaseExpired, tracker.ErrTextLeaseExpired)
					}
					p.recordFailure(now, ev.Offset, o.attempt, tracker.ErrTextLeaseExpired, o.appVersion)
					m.probeLost(now, s, o)
					m.note(slog.LevelDebug, "lease expired", "topic", s.cfg.Topic, "partition", p.num, "offset", ev.Offset, "attempt", ev.Attempt)
				}
			}
		}
	}
}

// forget removes a delivery whose lease expired from whichever consumer
// holds it, and returns what was known of it.
func (m *machine) forget(s *sub, p *part, offset int64, token uint64) sent {
	k := refKey{topic: s.cfg.Topic, part: p.num, offset: offset}
	for _, c := range m.consumers {
		if o, ok := c.outstanding[k]; ok && o.token == token {
			delete(c.outstanding, k)
			o.expired = true
			m.expired[k] = o
			return o
		}
	}
	return sent{}
}

// candidate is a delivery taken from a tracker and not yet sent: the
// ledger may still turn it away.
type candidate struct {
	c     *consumer
	s     *sub
	p     *part
	d     tracker.Delivery[engine.Record]
	probe bool   // the one delivery let through a half-open breaker
	inc   uint64 // the partition's incarnation when it was taken
	// gen is the partition's ownership generation when it was taken (0
	// without a coordinator): the ledger claim carries it, so that a lease
	// of a member fenced since is taken over at once.
	gen uint64
	// Set by admit: what the app sees.
	wire      uint64
	attempt   int
	lastError string
}

// dispatch hands ready deliveries to consumers with free credit: it takes
// candidates from the trackers (round-robin over subscriptions and
// partitions, within each subscription's breaker allowance), passes them
// through the ledger in one batch, and sends each consumer its frames.
func (m *machine) dispatch(now time.Time) {
	if m.cfg.Ledger != nil && m.claimsInFlight >= maxClaimsInFlight {
		return // the next round starts when a claim comes back
	}
	cands := m.candBuf[:0]
	for _, c := range m.consumers {
		free := c.free()
		if free <= 0 || c.closed {
			continue
		}
		for i := range m.subs {
			if free <= 0 {
				break
			}
			s := m.subs[(c.rr+i)%len(m.subs)]
			if !c.wants(s) {
				continue
			}
			limit, probe := s.allowance(now, free)
			for j := range s.parts {
				if limit <= 0 {
					break
				}
				p := s.parts[(c.rrPart+j)%len(s.parts)]
				if !m.delivering(p) {
					continue
				}
				m.delBuf = p.tr.Next(now, limit, m.delBuf[:0])
				for k := range m.delBuf {
					d := &m.delBuf[k]
					if c.maxFrameBytes > 0 {
						if size := deliveryBytes(d) + len(s.cfg.Topic) + len(m.cfg.Name); size > c.maxFrameBytes {
							m.tooLarge(now, c, s, p, d, size)
							continue
						}
					}
					if until, ok := s.delayed(now); ok {
						_ = p.tr.Defer(now, d.Offset, d.Token, until) // held back uncounted, its key with it
						m.fault(s, faultDelay)
						continue
					}
					cands = append(cands, candidate{c: c, s: s, p: p, d: *d, probe: probe, inc: p.inc, gen: s.claimGen(p)})
					limit--
					free--
				}
			}
		}
		c.rr++
		c.rrPart++
	}
	if len(cands) == 0 {
		return
	}
	for i := range cands {
		// Redelivered (or about to be decided by the ledger): an ack for the
		// expired lease is no longer welcome.
		delete(m.expired, refKey{cands[i].s.cfg.Topic, cands[i].p.num, cands[i].d.Offset})
	}
	if m.cfg.Ledger != nil {
		m.claim(now, cands) // sent when the ledger answers (claimed)
	} else {
		for i := range cands {
			cands[i].wire, cands[i].attempt = cands[i].d.Token, cands[i].d.Attempt
			cands[i].c.credit--
		}
		m.send(now, cands)
	}
	clear(cands)
	m.candBuf = cands[:0]
}

// tooLargeRetry is how long a delivery too large for a stream waits before
// it is offered again (to any consumer): the notice is not repeated faster.
const tooLargeRetry = 10 * time.Second

// tooLarge refuses a delivery larger than what the consumer can receive:
// it goes back uncounted, and the stream is told why (its stream stays up).
func (m *machine) tooLarge(now time.Time, c *consumer, s *sub, p *part, d *tracker.Delivery[engine.Record], size int) {
	_ = p.tr.Defer(now, d.Offset, d.Token, now.Add(tooLargeRetry))
	msg := "delivery of " + strconv.Itoa(size) + " bytes (topic " + s.cfg.Topic + " partition " + strconv.Itoa(int(p.num)) +
		" offset " + strconv.FormatInt(d.Offset, 10) + ") exceeds this stream's frame limit of " + strconv.Itoa(c.maxFrameBytes) +
		" bytes: raise the client's receive limit and Start.max_receive_bytes (the Go SDK's MaxReceiveBytes option); it is kept and offered again"
	m.count(metricKey{id: metSettleErrors, l1: ReasonDeliveryTooLarge}, 1)
	m.note(slog.LevelWarn, "delivery too large for the consumer's receive limit", "consumer", c.name, "topic", s.cfg.Topic, "partition", p.num,
		"offset", d.Offset, "bytes", size, "frame_limit", c.maxFrameBytes)
	ref := &spoolv1.DeliveryRef{Topic: s.cfg.Topic, Partition: p.num, Offset: d.Offset}
	m.emit(action{kind: actSend, c: c, frame: &spoolv1.SubscribeResponse{SettleErrors: []*spoolv1.SettleError{{Ref: ref, Reason: ReasonDeliveryTooLarge, Message: msg}}}})
}

// send hands admitted candidates to their consumers, in frames of at most
// the consumer's frame bytes. Their credit is already taken.
func (m *machine) send(now time.Time, cands []candidate) {
	for i := range cands {
		cd := &cands[i]
		c := cd.c
		if what, ok := undecodable(&cd.d.Value); ok {
			m.refuseUndecodable(now, cd, what)
			continue
		}
		d := c.track(now, m.cfg.Name, cd.s, cd.p, cd, m.cfg.Tracer != nil)
		if cd.s.traced > 0 {
			m.trace(now, cd.s, spoolv1.TailDeliveryKind_TAIL_DELIVERY_KIND_DELIVERED, cd.p.num, d.GetOffset(), d.GetMessageId(), d.GetAttempt(), c, "", "")
		}
		m.frameAdd(c, cd.s, d)
		if cd.s.faults != nil {
			m.injectSendFaults(now, c, cd, d)
		}
		if cd.probe {
			m.probeSent(now, cd.s)
		}
	}
	for _, c := range m.consumers {
		if len(c.frame) > 0 {
			m.flushFrame(c)
		}
	}
}

// frameAdd appends d, a delivery of s, to the frame being built for c,
// sending the frame first when d would take it past the consumer's frame
// bytes.
func (m *machine) frameAdd(c *consumer, s *sub, d *spoolv1.Delivery) {
	size := wireBytes(d)
	if c.maxFrameBytes > 0 && len(c.frame) > 0 && c.frameBytes+size > c.maxFrameBytes {
		m.flushFrame(c)
	}
	c.frame = append(c.frame, d)
	c.frameBytes += size
	if at, ok := m.fenceAt(s); ok && (c.frameFence.IsZero() || at.Before(c.frameFence)) {
		c.frameFence = at
	}
}

// flushFrame sends the frame built for c, with the earliest time at which
// the member of one of its deliveries fences itself.
func (m *machine) flushFrame(c *consumer) {
	m.emit(action{kind: actSend, c: c, frame: &spoolv1.SubscribeResponse{Deliveries: c.frame}, fenceAt: c.frameFence})
	c.frame, c.frameBytes, c.frameFence = nil, 0, time.Time{}
}

// unsentRetry is how long deliveries of a frame that could not be queued
// for their stream wait before they are offered again, uncounted.
const unsentRetry = 200 * time.Millisecond

// frameUnsent answers an actSend the driver could not queue (the stream is
// not reading): its deliveries go back uncounted and their credit returns,
// rather than waiting for their leases.
func (m *machine) frameUnsent(now time.Time, c *consumer, f *spoolv1.SubscribeResponse) {
	for _, d := range f.GetDeliveries() {
		k := refKey{d.GetTopic(), d.GetPartition(), d.GetOffset()}
		o, ok := c.outstanding[k]
		if !ok {
			if len(c.dups) > 0 && m.duplicateSettled(c, k, d.GetFencingToken()) {
				c.credit++ // the copy of a duplicated delivery took one
			}
			continue
		}
		s, p := m.lookup(k.topic, k.part)
		if p == nil {
			continue
		}
		delete(c.outstanding, k)
		c.credit++
		if p.tr.Defer(now, k.offset, o.token, now.Add(unsentRetry)) == nil {
			if m.cfg.Tracer != nil {
				m.span(now, s, p, k.offset, o, c, OutcomeHandedBack, "")
			}
			s.stats[statUncounted]++
			m.probeLost(now, s, o)
			m.ledgerRelease(s, o, "", true)
		}
	}
	if n := len(f.GetSettleErrors()); n > 0 {
		m.note(slog.LevelWarn, "settle errors dropped: consumer not reading", "consumer", c.name, "count", n)
	}
}

func (m *machine) outstanding() int {
	n := 0
	for _, c := range m.consumers {
		n += len(c.outstanding)
	}
	return n
}

// finished reports whether a drain is complete: nothing outstanding at the
// app, no dead letter or claim waiting for an answer.
func (m *machine) finished() bool {
	return m.draining && m.outstanding() == 0 && m.dlqInFlight == 0 && len(m.dlWait) == 0 && m.claimsInFlight == 0
}

// nextWake is the earliest time the machine has timed work: a lease or
// retry deadline, the next commit, a breaker change, or the gauges.
func (m *machine) nextWake(now time.Time) time.Time {
	w := m.nextLag
	if m.dirty() && m.nextCommit.Before(w) {
		w = m.nextCommit
	}
	for _, s := range m.subs {
		for _, p := range s.parts {
			if d, ok := p.tr.NextDeadline(); ok && d.Before(w) {
				w = d
			}
			if p.own == ownRevoking && !p.handing && p.revokeBy.Before(w) {
				w = p.revokeBy
			}
			if p.own == ownRevoking && !p.handing && p.handoverAt.After(now) && p.handoverAt.Before(w) {
				w = p.handoverAt
			}
			if p.retryAt.After(now) && p.retryAt.Before(w) {
				w = p.retryAt
			}
		}
		if s.brk != nil {
			if d, ok := s.brk.NextChange(); ok && d.Before(w) {
				w = d
			}
		}
		if d, ok := m.healthWake(s); ok && d.Before(w) {
			w = d
		}
		if d, ok := m.fenceWake(s); ok && d.Before(w) {
			w = d
		}
	}
	if m.ledgerRetryAt.After(now) && m.ledgerRetryAt.Before(w) {
		w = m.ledgerRetryAt
	}
	return w
}

// join adds a consumer.
func (m *machine) join(c *consumer) {
	m.consumers = append(m.consumers, c)
	m.emit(action{kind: actConnected})
	m.gauge(metricKey{id: metConsumers}, float64(len(m.consumers)))
}

// leave releases everything the consumer still holds at once: each counts
// as an attempt (the app may have started it) and is redelivered without
// backoff; unless the stream ended because the sidecar failed to send on
// it (c.sendFailed): then none counts, as the app did nothing wrong.
func (m *machine) leave(now time.Time, c *consumer) {
	c.closed = true
	for k, o := range c.outstanding {
		s, p := m.lookup(k.topic, k.part)
		if p == nil {
			continue
		}
		if c.sendFailed {
			if p.tr.Release(now, k.offset, o.token, false) == nil {
				s.stats[statUncounted]++
				m.probeLost(now, s, o)
				m.ledgerRelease(s, o, "", true)
			}
			continue
		}
		if err := p.tr.Release(now, k.offset, o.token, true); err == nil {
			if m.cfg.Tracer != nil {
				m.span(now, s, p, k.offset, o, c, OutcomeStreamClosed, tracker.ErrTextReleased)
			}
			s.stats[statStreamClosed]++
			m.probeLost(now, s, o)
			m.ledgerRelease(s, o, tracker.ErrTextReleased, false)
			p.recordFailure(now, k.offset, o.attempt, tracker.ErrTextReleased, o.appVersion)
		}
	}
	clear(c.outstanding)
	clear(c.dups)
	for i, x := range m.consumers {
		if x == c {
			m.consumers = append(m.consumers[:i], m.consumers[i+1:]...)
			break
		}
	}
	m.gauge(metricKey{id: metConsumers}, float64(len(m.consumers)))
	m.emit(action{kind: actConnected})
}

// drain stops fetching and handing out deliveries.
func (m *machine) drain() { m.draining = true }

// ledgerDone queues the ledger write of an ack.
func (m *machine) ledgerDone(s *sub, p *part, offset int64, o sent) {
	p.takeWire(offset)
	delete(p.history, offset)
	if m.cfg.Ledger != nil && o.id != "" {
		// The attempts its claim answered let Redis complete it in one
		// command (ledger.Finish).
		s.ledger.complete = append(s.ledger.complete, ledger.Finish{ID: o.id, Token: o.wire, Attempts: o.attempt})
	}
}

// ledgerRelease queues the ledger write of a failed or handed-back attempt.
func (m *machine) ledgerRelease(s *sub, o sent, errText string, uncount bool) {
	if m.cfg.Ledger != nil && o.id != "" {
		s.ledger.release = append(s.ledger.release, ledger.Release{ID: o.id, Token: o.wire, Error: errText, Uncount: uncount})
	}
}
