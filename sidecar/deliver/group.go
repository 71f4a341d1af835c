package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// Group delivers the messages of one consumer group. Run owns all of its
// state; other goroutines talk to it through its inbox.
type Group struct {
	cfg GroupConfig
	eng Engine
	m   *metrics.Metrics
	log *slog.Logger

	inbox   chan event
	stopped chan struct{} // closed when Run returns
	subs    []*sub
	byTop   map[string]*sub

	// Results of asynchronous work, each channel sized so its sender never blocks.
	dlqDone      chan dlqResult
	commits      chan commitJob
	commitDone   chan commitJob
	ledgerWrites chan ledgerBatch
	claims       chan *claimJob // to the claimer goroutine
	claimDone    chan *claimJob // answered claims, back to the loop

	// Loop-owned state.
	consumers   []*consumer
	draining    bool
	dlqInFlight int
	// claimsInFlight counts ledger claims sent and not yet applied.
	claimsInFlight int
	nextLag        time.Time
	nextCommit     time.Time
	dlBuf          []tracker.DeadLetter[engine.Record]
	delBuf         []tracker.Delivery[engine.Record]
	candBuf        []candidate
	evBuf          []tracker.Event
	// expired holds deliveries whose lease ended (and are not yet
	// redelivered): a late ack for them is still applied.
	expired map[refKey]sent
	// ledgerRetryAt: while the ledger is unavailable under policy pause,
	// nothing is delivered before this time.
	ledgerRetryAt time.Time
}

type sub struct {
	cfg     Subscription
	parts   []*part
	changed <-chan struct{}

	committing bool         // a commit of this topic is being written
	brk        *breaker.Set // nil: no breakers configured
	// probePending: the probe was taken and waits for the ledger's answer.
	probePending bool
	ledger       ledgerOps // ledger writes waiting for the next flush
	// Metric children resolved once (no label lookups on the hot path).
	deliveries, redeliveries, leaseExpiries            prometheus.Counter
	acks, retries, deadLetters, releases, streamClosed prometheus.Counter
	handleLatency                                      prometheus.Observer
	inFlight, parked, window                           prometheus.Gauge
	dedupeHits, undeduped, uncounted, ledgerDropped    prometheus.Counter
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
	// committed is the last position written; dirty when it differs.
	committed engine.Position
	// wire maps offsets to the ledger's fencing token of their last grant.
	wire map[int64]uint64
	// history holds the failed attempts of unfinished messages.
	history map[int64][]AttemptRecord
	// avgRecordBytes sizes reads to the room in the window.
	avgRecordBytes   int
	lagMsgs, lagSecs prometheus.Gauge
}

// NewGroup restores the group's committed positions and returns it ready to Run.
func NewGroup(cfg GroupConfig, eng Engine, m *metrics.Metrics, logger *slog.Logger) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	g := &Group{cfg: cfg, eng: eng, m: m, log: logger.With("group", cfg.Name),
		inbox: make(chan event, cfg.InboxSize), byTop: map[string]*sub{}, expired: map[refKey]sent{},
		dlqDone: make(chan dlqResult, maxDLQInFlight), stopped: make(chan struct{}),
		ledgerWrites: make(chan ledgerBatch, ledgerWriterQueue)}
	g.claims = make(chan *claimJob, maxClaimsInFlight+len(cfg.Subscriptions))
	g.claimDone = make(chan *claimJob, maxClaimsInFlight+len(cfg.Subscriptions))
	for _, sc := range cfg.Subscriptions {
		s, err := g.newSub(sc)
		if err != nil {
			return nil, err
		}
		g.subs = append(g.subs, s)
		g.byTop[sc.Topic] = s
	}
	g.commits = make(chan commitJob, len(g.subs))
	g.commitDone = make(chan commitJob, len(g.subs))
	return g, nil
}

func (g *Group) newSub(sc Subscription) (*sub, error) {
	n, err := g.eng.Partitions(sc.Topic)
	if err != nil {
		return nil, fmt.Errorf("deliver: group %q: %w", g.cfg.Name, err)
	}
	if _, err := g.eng.Partitions(sc.DLQTopic); err != nil {
		return nil, fmt.Errorf("deliver: group %q dead-letter topic: %w", g.cfg.Name, err)
	}
	pos, err := g.eng.LoadPositions(g.cfg.Name, sc.Topic)
	if err != nil {
		return nil, fmt.Errorf("deliver: group %q: %w", g.cfg.Name, err)
	}
	gl, tl := g.cfg.Name, sc.Topic
	m := g.m
	s := &sub{cfg: sc,
		deliveries:    m.Deliveries.WithLabelValues(gl, tl),
		redeliveries:  m.Redeliveries.WithLabelValues(gl, tl),
		leaseExpiries: m.LeaseExpiries.WithLabelValues(gl, tl),
		acks:          m.Settlements.WithLabelValues(gl, tl, "ack"),
		retries:       m.Settlements.WithLabelValues(gl, tl, "retry"),
		deadLetters:   m.Settlements.WithLabelValues(gl, tl, "dead_letter"),
		releases:      m.Settlements.WithLabelValues(gl, tl, "release"),
		streamClosed:  m.Settlements.WithLabelValues(gl, tl, "stream_closed"),
		handleLatency: m.HandleLatency.WithLabelValues(gl, tl),
		inFlight:      m.InFlight.WithLabelValues(gl, tl),
		parked:        m.ParkedKeys.WithLabelValues(gl, tl),
		window:        m.WindowMessages.WithLabelValues(gl, tl),
		dedupeHits:    m.DedupeHits.WithLabelValues(gl, tl),
		undeduped:     m.UndedupedDeliveries.WithLabelValues(gl, tl),
		uncounted:     m.UncountedFailures.WithLabelValues(gl, tl),
		ledgerDropped: m.LedgerDropped.WithLabelValues(gl, tl),
	}
	if sc.Breaker != nil {
		brk, err := breaker.NewSet(*sc.Breaker)
		if err != nil {
			return nil, fmt.Errorf("deliver: group %q topic %q: %w", g.cfg.Name, sc.Topic, err)
		}
		s.brk = brk
	}
	for p := range n {
		start, _, err := g.eng.Offsets(sc.Topic, p)
		if err != nil {
			return nil, err
		}
		committed := pos[p]
		next := max(committed.Next, start)
		tr, err := tracker.New[engine.Record](sc.Tracker, next)
		if err != nil {
			return nil, fmt.Errorf("deliver: group %q topic %q: %w", g.cfg.Name, sc.Topic, err)
		}
		pl := strconv.Itoa(int(p))
		pt := &part{num: p, tr: tr, fetchAt: next, committed: committed, avgRecordBytes: 1024,
			lagMsgs: m.LagMessages.WithLabelValues(gl, tl, pl), lagSecs: m.LagSeconds.WithLabelValues(gl, tl, pl)}
		for _, o := range committed.Done {
			if o >= next {
				pt.skip = append(pt.skip, o)
			}
		}
		s.parts = append(s.parts, pt)
	}
	return s, nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// Subscribes reports whether the group consumes topic, and in which mode.
func (g *Group) Subscribes(topic string) (Mode, bool) {
	s, ok := g.byTop[topic]
	if !ok {
		return 0, false
	}
	return s.cfg.Mode, true
}

// partitions returns the number of partitions of a subscribed topic.
func (g *Group) partitions(topic string) int {
	if s, ok := g.byTop[topic]; ok {
		return len(s.parts)
	}
	return 0
}

// Topics returns the group's topics in the given mode.
func (g *Group) Topics(mode Mode) []string {
	var out []string
	for _, s := range g.subs {
		if s.cfg.Mode == mode {
			out = append(out, s.cfg.Topic)
		}
	}
	return out
}

// Subscription returns the subscription of a topic.
func (g *Group) Subscription(topic string) (Subscription, bool) {
	s, ok := g.byTop[topic]
	if !ok {
		return Subscription{}, false
	}
	return s.cfg, true
}

// Run delivers until ctx ends, then drains: it stops fetching and handing
// out deliveries, waits up to DrainTimeout for those in flight to be
// settled, commits, and returns.
func (g *Group) Run(ctx context.Context) error {
	defer close(g.stopped)
	for _, s := range g.subs {
		ch, err := g.eng.Changed(s.cfg.Topic)
		if err != nil {
			return err
		}
		s.changed = ch
	}
	claimerDone := make(chan struct{})
	go func() { // owned by Run: ends when the loop closes g.claims
		defer close(claimerDone)
		g.runClaimer()
	}()
	defer func() {
		close(g.claims) // the loop has ended: nothing else sends
		<-claimerDone
	}()
	writerCtx, stopWriter := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	go func() { // owned by Run: settlements already handed over get a bounded last chance at the end
		defer close(writerDone)
		g.runLedgerWriter(writerCtx)
	}()
	defer func() {
		g.finishLedger(stopWriter, writerDone)
	}()
	committerCtx, stopCommitter := context.WithCancel(context.Background())
	committerDone := make(chan struct{})
	go func() { // owned by Run: stopped and awaited before the final commit
		defer close(committerDone)
		g.runCommitter(committerCtx)
	}()
	defer func() {
		stopCommitter()
		<-committerDone
	}()
	stopCallbacks := make(chan struct{})
	callbacksDone := make(chan struct{})
	go func() { // owned by Run: stopped and awaited when the loop ends
		defer close(callbacksDone)
		g.runCallbacks(stopCallbacks)
	}()
	defer func() {
		close(stopCallbacks)
		<-callbacksDone
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var drainDeadline <-chan time.Time
	done := ctx.Done()
	for {
		now := time.Now()
		if !g.draining {
			g.fetch(now)
		}
		g.tick(now)
		if !g.draining {
			g.dispatch(now)
		}
		g.deadLetters(now)
		g.flushLedger()
		g.maybeCommit(now, false)
		if !now.Before(g.nextLag) {
			g.refreshGauges(now)
			g.nextLag = now.Add(lagInterval)
		}
		if g.draining && g.outstanding() == 0 && !g.dlPending() && g.claimsInFlight == 0 {
			break
		}
		resetTimer(timer, g.nextWake(now).Sub(now))
		select {
		case ev := <-g.inbox:
			g.handle(now, ev)
			// Take whatever else is queued before doing a round of work.
			for more := true; more; {
				select {
				case ev := <-g.inbox:
					g.handle(time.Now(), ev)
				default:
					more = false
				}
			}
		case r := <-g.dlqDone:
			g.applyDLQ(now, r)
		case j := <-g.commitDone:
			g.applyCommit(j)
		case j := <-g.claimDone:
			g.applyClaim(time.Now(), j)
		case <-g.anyChanged():
			g.renewChanged()
		case <-timer.C:
		case <-done:
			g.log.Info("draining: no new deliveries; waiting for in-flight ones", "in_flight", g.outstanding(), "budget", g.cfg.DrainTimeout)
			g.draining = true
			done = nil
			drainDeadline = time.After(g.cfg.DrainTimeout)
		case <-drainDeadline:
			g.log.Warn("drain budget used up: unsettled deliveries will be redelivered after restart", "in_flight", g.outstanding())
			return g.stop(stopCommitter, committerDone)
		}
	}
	return g.stop(stopCommitter, committerDone)
}

// stop ends the committer, applies a commit it finished, and writes the
// final positions.
func (g *Group) stop(stopCommitter func(), committerDone <-chan struct{}) error {
	stopCommitter()
	<-committerDone
	for {
		select {
		case j := <-g.commitDone:
			g.applyCommit(j)
			continue
		default:
		}
		break
	}
	for _, s := range g.subs {
		s.committing = false
	}
	return g.finalCommit()
}

func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(max(d, 0))
}

// anyChanged returns a channel that fires when a subscribed topic has new
// data. With one topic (the common case) it is that topic's channel; with
// several, the first sub whose fetch is not blocked by the window.
func (g *Group) anyChanged() <-chan struct{} {
	if g.draining {
		return nil
	}
	for _, s := range g.subs {
		for _, p := range s.parts {
			if p.tr.Wants() > 0 {
				return s.changed
			}
		}
	}
	return nil
}

func (g *Group) renewChanged() {
	for _, s := range g.subs {
		if ch, err := g.eng.Changed(s.cfg.Topic); err == nil {
			s.changed = ch
		}
	}
}

// nextWake is the earliest time the loop has timed work: a lease or retry
// deadline, the next commit, or the next gauge refresh.
func (g *Group) nextWake(now time.Time) time.Time {
	w := g.nextLag
	if g.dirty() && g.nextCommit.Before(w) {
		w = g.nextCommit
	}
	for _, s := range g.subs {
		for _, p := range s.parts {
			if d, ok := p.tr.NextDeadline(); ok && d.Before(w) {
				w = d
			}
		}
		if s.brk != nil {
			if d, ok := s.brk.NextChange(); ok && d.Before(w) {
				w = d
			}
		}
		if s.ledger.len() > 0 {
			if retry := now.Add(ledgerRetryWait); retry.Before(w) {
				w = retry
			}
		}
	}
	// With several topics anyChanged watches one; poll the others briefly.
	if len(g.subs) > 1 && !g.draining {
		if poll := now.Add(10 * time.Millisecond); poll.Before(w) {
			w = poll
		}
	}
	return w
}

// fetch feeds each partition's tracker with durable records it has room for.
func (g *Group) fetch(now time.Time) {
	for _, s := range g.subs {
		if s.paused(now) {
			continue
		}
		for _, p := range s.parts {
			g.fetchPart(now, s, p)
		}
	}
}

func (g *Group) fetchPart(now time.Time, s *sub, p *part) {
	for {
		want := p.tr.Wants()
		// Refill in large steps (a quarter of the window), unless the tracker
		// is running dry: a read returns whole log batches, so reading for a
		// handful of records would decode a batch to keep a few of its records.
		if want <= 0 || (want < p.tr.Config().WindowMessages/4 && p.tr.Pending() > 0) {
			return
		}
		// Read about as many bytes as the tracker has room for: the records
		// kept alias the read buffer, so an oversized read would pin memory
		// well beyond the window.
		maxBytes := min(g.cfg.FetchMaxBytes, max(want*p.avgRecordBytes, minFetchBytes))
		recs, err := g.eng.Fetch(s.cfg.Topic, p.num, p.fetchAt, maxBytes, nil)
		var oor *engine.OffsetOutOfRangeError
		if errors.As(err, &oor) && p.fetchAt < oor.Start {
			// Retention deleted records the group had not finished.
			lost := oor.Start - p.fetchAt
			g.m.ExpiredUnread.WithLabelValues(g.cfg.Name, s.cfg.Topic).Add(float64(lost))
			g.log.Error("records expired before the group finished them (lag exceeded retention)",
				"topic", s.cfg.Topic, "partition", p.num, "from", p.fetchAt, "to", oor.Start)
			p.fetchAt = oor.Start
			continue
		}
		if err != nil {
			g.log.Error("fetch failed; retrying at the next wake-up", "topic", s.cfg.Topic, "partition", p.num, "offset", p.fetchAt, "err", err)
			return
		}
		if len(recs) == 0 {
			return
		}
		p.avgRecordBytes = recordBytes(recs)
		batch := make([]tracker.Record[engine.Record], 0, min(len(recs), want))
		for _, r := range recs {
			if len(batch) == want {
				break
			}
			p.fetchAt = r.Offset + 1
			for p.skipAt < len(p.skip) && p.skip[p.skipAt] < r.Offset {
				p.skipAt++
			}
			if p.skipAt < len(p.skip) && p.skip[p.skipAt] == r.Offset {
				p.skipAt++
				continue // finished before the restart
			}
			if !g.admit(&r) {
				// Not for this group (a message redriven to another group):
				// finished here without delivery.
				p.skip = slices.Insert(p.skip, p.skipAt, r.Offset)
				p.skipAt++
				continue
			}
			batch = append(batch, tracker.Record[engine.Record]{Offset: r.Offset, Key: string(r.Key), Value: r})
		}
		if len(batch) > 0 && len(batch) < len(recs)/2 {
			compact(batch)
		}
		if err := p.tr.Add(now, batch...); err != nil {
			// Cannot happen: offsets increase and batch ≤ Wants. Stop feeding
			// this partition loudly rather than deliver out of order.
			g.log.Error("tracker refused records", "topic", s.cfg.Topic, "partition", p.num, "err", err)
			return
		}
	}
}

// minFetchBytes is the smallest read: a few records, to amortize the call.
const minFetchBytes = 16 << 10

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
func (g *Group) admit(r *engine.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderRedriveGroup {
			return string(h.Value) == g.cfg.Name
		}
	}
	return true
}

// tick advances the trackers' clocks: lease expiries and due retries.
func (g *Group) tick(now time.Time) {
	for _, s := range g.subs {
		for _, p := range s.parts {
			if d, ok := p.tr.NextDeadline(); !ok || d.After(now) {
				continue
			}
			g.evBuf = p.tr.Tick(now, g.evBuf[:0])
			for _, ev := range g.evBuf {
				if ev.Kind == tracker.EventLeaseExpired {
					s.leaseExpiries.Inc()
					o := g.forget(s, p, ev.Offset, ev.Token)
					p.recordFailure(now, ev.Offset, o.attempt, tracker.ErrTextLeaseExpired, o.appVersion)
					g.probeLost(now, s, o)
					g.log.Debug("lease expired", "topic", s.cfg.Topic, "partition", p.num, "offset", ev.Offset, "attempt", ev.Attempt)
				}
			}
		}
	}
}

// forget removes a delivery whose lease expired from whichever consumer
// holds it, and returns what was known of it.
func (g *Group) forget(s *sub, p *part, offset int64, token uint64) sent {
	k := refKey{topic: s.cfg.Topic, part: p.num, offset: offset}
	for _, c := range g.consumers {
		if o, ok := c.outstanding[k]; ok && o.token == token {
			delete(c.outstanding, k)
			g.expired[k] = o
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
	probe bool // the one delivery let through a half-open breaker
	// Set by admit: what the app sees.
	wire      uint64
	attempt   int
	lastError string
}

// dispatch hands ready deliveries to consumers with free credit: it takes
// candidates from the trackers (round-robin over subscriptions and
// partitions, within each subscription's breaker allowance), passes them
// through the ledger in one batch, and sends each consumer one frame.
func (g *Group) dispatch(now time.Time) {
	if g.cfg.Ledger != nil && g.claimsInFlight >= maxClaimsInFlight {
		return // the next round starts when a claim comes back
	}
	cands := g.candBuf[:0]
	for _, c := range g.consumers {
		free := c.free()
		if free <= 0 || c.closed {
			continue
		}
		for i := range g.subs {
			if free <= 0 {
				break
			}
			s := g.subs[(c.rr+i)%len(g.subs)]
			if !c.wants(s) {
				continue
			}
			limit, probe := s.allowance(now, free)
			for j := range s.parts {
				if limit <= 0 {
					break
				}
				p := s.parts[(c.rrPart+j)%len(s.parts)]
				g.delBuf = p.tr.Next(now, limit, g.delBuf[:0])
				for k := range g.delBuf {
					cands = append(cands, candidate{c: c, s: s, p: p, d: g.delBuf[k], probe: probe})
				}
				limit -= len(g.delBuf)
				free -= len(g.delBuf)
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
		delete(g.expired, refKey{cands[i].s.cfg.Topic, cands[i].p.num, cands[i].d.Offset})
	}
	if g.cfg.Ledger != nil {
		g.claim(now, cands) // sent when the ledger answers (applyClaim)
	} else {
		for i := range cands {
			cands[i].wire, cands[i].attempt = cands[i].d.Token, cands[i].d.Attempt
			cands[i].c.credit--
		}
		g.send(now, cands)
	}
	clear(cands)
	g.candBuf = cands[:0]
}

// send hands admitted candidates to their consumers, one frame each. Their
// credit is already taken.
func (g *Group) send(now time.Time, cands []candidate) {
	for i := range cands {
		cd := &cands[i]
		cd.c.frame = append(cd.c.frame, cd.c.track(now, g.cfg.Name, cd.s, cd.p, cd))
		if cd.probe {
			g.probeSent(now, cd.s)
		}
	}
	for _, c := range g.consumers {
		if len(c.frame) > 0 {
			c.send(&spoolv1.SubscribeResponse{Deliveries: c.frame})
			c.frame = nil
		}
	}
}

func (g *Group) outstanding() int {
	n := 0
	for _, c := range g.consumers {
		n += len(c.outstanding)
	}
	return n
}

// refreshGauges sets in-flight, parked, window and lag gauges.
func (g *Group) refreshGauges(now time.Time) {
	for _, s := range g.subs {
		inflight, parked, window := 0, 0, 0
		for _, p := range s.parts {
			inflight += p.tr.InFlight()
			parked += p.tr.Parked()
			window += p.tr.Pending() + p.tr.InFlight()
			g.refreshLag(now, s, p)
		}
		s.inFlight.Set(float64(inflight))
		s.parked.Set(float64(parked))
		s.window.Set(float64(window))
	}
	g.m.Consumers.WithLabelValues(g.cfg.Name).Set(float64(len(g.consumers)))
}

// refreshLag computes lag in messages (appended, not finished) and seconds
// (age of the oldest unfinished message).
func (g *Group) refreshLag(now time.Time, s *sub, p *part) {
	_, end, err := g.eng.Offsets(s.cfg.Topic, p.num)
	if err != nil {
		return
	}
	pos := p.position()
	next := pos.Next
	lag := end - next - int64(len(pos.Done))
	p.lagMsgs.Set(float64(max(lag, 0)))
	if lag <= 0 {
		p.lagSecs.Set(0)
		return
	}
	recs, err := g.eng.Fetch(s.cfg.Topic, p.num, next, 1, nil)
	if err != nil || len(recs) == 0 {
		return
	}
	p.lagSecs.Set(max(now.Sub(time.UnixMilli(recs[0].Timestamp)).Seconds(), 0))
}
