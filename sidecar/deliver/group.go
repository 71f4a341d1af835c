package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// Group delivers the messages of one consumer group: the driver of its
// machine. Run owns the machine and carries out its actions; other
// goroutines talk to it through its inbox (app settlements, joins, admin
// queries: bounded, pushing back on the app) or its results mailbox
// (engine completions, ledger answers, commits: never blocking).
type Group struct {
	cfg GroupConfig
	eng Engine
	met *metrics.Metrics
	log *slog.Logger

	inbox   chan event
	stopped chan struct{} // closed when Run returns
	mc      *machine      // owned by Run's goroutine

	results *mailbox[result]
	taps    []*tap // the Tail streams following deliveries; owned by Run's goroutine
}

// result is the answer to an asynchronous action.
type result struct {
	claim  *claimJob
	read   *readJob
	dl     *dlqJob
	commit *commitJob
	assign *assignView
	lagged bool // the lag prober finished a round
}

// NewGroup restores the group's committed positions and returns it ready to Run.
func NewGroup(cfg GroupConfig, eng Engine, m *metrics.Metrics, logger *slog.Logger) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	log := logger.With("group", cfg.Name)
	g := &Group{cfg: cfg, eng: eng, met: m, log: log,
		inbox: make(chan event, cfg.InboxSize), stopped: make(chan struct{}), results: newMailbox[result]()}
	g.mc = &machine{cfg: cfg, byTop: map[string]*sub{}, expired: map[refKey]sent{}, cluster: cfg.Coordinator != nil,
		bud: memBudget{limit: cfg.MemoryBytes}}
	m.DeliveryMemoryLimit.WithLabelValues(cfg.Name).Set(float64(cfg.MemoryBytes))
	for _, sc := range cfg.Subscriptions {
		s, err := g.newSub(sc)
		if err != nil {
			return nil, err
		}
		g.mc.subs = append(g.mc.subs, s)
		g.mc.byTop[sc.Topic] = s
	}
	return g, nil
}

func (g *Group) newSub(sc Subscription) (*sub, error) {
	n, err := g.eng.Partitions(sc.Topic)
	if err != nil {
		return nil, fmt.Errorf("deliver: group %q: %w", g.cfg.Name, err)
	}
	dlqParts, err := g.eng.Partitions(sc.DLQTopic)
	if err != nil {
		return nil, fmt.Errorf("deliver: group %q dead-letter topic: %w", g.cfg.Name, err)
	}
	var pos map[int32]engine.Position
	if g.cfg.Coordinator == nil { // in a cluster the coordinator keeps them
		if pos, err = g.eng.LoadPositions(g.cfg.Name, sc.Topic); err != nil {
			return nil, fmt.Errorf("deliver: group %q: %w", g.cfg.Name, err)
		}
	}
	starts := make([]int64, n)
	for p := range n {
		if starts[p], _, err = g.eng.Offsets(sc.Topic, p); err != nil {
			return nil, err
		}
	}
	s, err := g.mc.newSub(sc, dlqParts, starts, pos)
	if err != nil {
		return nil, fmt.Errorf("deliver: group %q topic %q: %w", g.cfg.Name, sc.Topic, err)
	}
	s.metrics = newSubMetrics(g.met, g.cfg.Name, sc.Topic, len(s.parts))
	return s, nil
}

// post queues an event for the loop, giving up when ctx ends.
func (g *Group) post(ctx context.Context, ev event) error {
	select {
	case g.inbox <- ev:
		return nil
	case <-g.stopped:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// Subscribes reports whether the group consumes topic, and in which mode.
func (g *Group) Subscribes(topic string) (Mode, bool) {
	sc, ok := g.Subscription(topic)
	return sc.Mode, ok
}

// partitions returns the number of partitions of a subscribed topic (fixed
// after NewGroup).
func (g *Group) partitions(topic string) int {
	if s, ok := g.mc.byTop[topic]; ok {
		return len(s.parts)
	}
	return 0
}

// Topics returns the group's topics in the given mode.
func (g *Group) Topics(mode Mode) []string {
	var out []string
	for _, sc := range g.cfg.Subscriptions {
		if sc.Mode == mode {
			out = append(out, sc.Topic)
		}
	}
	return out
}

// Subscription returns the subscription of a topic.
func (g *Group) Subscription(topic string) (Subscription, bool) {
	for _, sc := range g.cfg.Subscriptions {
		if sc.Topic == topic {
			return sc, true
		}
	}
	return Subscription{}, false
}

// Run delivers until ctx ends, then drains: it stops fetching and handing
// out deliveries, waits up to DrainTimeout for those in flight to be
// settled, commits, and returns.
//
// Goroutines, all owned here and awaited before Run returns: the loop (the
// caller's), the ledger pipeline (when there is a ledger), the committer,
// the membership (in a cluster), the callback dispatcher (when there are
// callback subscriptions), the lag prober and the readers (when
// ReadsInFlight is set). Only the loop touches the machine.
func (g *Group) Run(ctx context.Context) error {
	defer close(g.stopped)
	topics := make([]string, 0, len(g.cfg.Subscriptions))
	for _, sc := range g.cfg.Subscriptions {
		topics = append(topics, sc.Topic)
	}
	changed := make(chan struct{}, 1)
	unwatch, err := g.eng.Watch(topics, changed)
	if err != nil {
		return err
	}
	defer unwatch()

	var wg sync.WaitGroup
	goFunc := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	defer wg.Wait()

	// Ledger pipeline: settlements already handed over get a bounded last
	// chance when the loop ends.
	var ledgerOps *mailbox[ledgerOp]
	if g.cfg.Ledger != nil {
		ledgerOps = newMailbox[ledgerOp]()
		pl := &pipeline{led: g.cfg.Ledger, group: g.cfg.Name, owner: g.cfg.Owner, log: g.log, in: ledgerOps,
			answers: func(j *claimJob) { g.results.put(result{claim: j}) }, writeDelay: g.cfg.LedgerWriteDelay}
		finish := make(chan struct{})
		plCtx, stopPipeline := context.WithCancel(context.Background())
		goFunc(func() { pl.run(plCtx, finish) })
		defer func() {
			close(finish)
			t := time.AfterFunc(2*ledgerTimeout, stopPipeline)
			defer t.Stop()
			defer stopPipeline()
			wg.Wait()
		}()
	}
	commits := newMailbox[*commitJob]()
	stopCommitter, committerDone := make(chan struct{}), make(chan struct{})
	goFunc(func() {
		defer close(committerDone)
		g.runCommitter(commits, stopCommitter)
	})
	// Membership (a cluster): it outlives the loop, heartbeating through
	// the drain, and leaves after the final commit.
	var ms *membership
	if g.cfg.Coordinator != nil {
		ms = newMembership(g)
		msCtx, stopMembership := context.WithCancel(context.Background())
		msDone := make(chan struct{})
		goFunc(func() {
			defer close(msDone)
			ms.run(msCtx)
		})
		defer func() {
			close(ms.leave)
			select {
			case <-msDone:
			case <-time.After(2 * coordCallTimeout * time.Duration(max(len(ms.subs), 1))):
			}
			stopMembership()
			<-msDone
		}()
	}
	stopCallbacks := make(chan struct{})
	goFunc(func() { g.runCallbacks(stopCallbacks) })
	defer close(stopCallbacks)
	// The lag prober: the engine calls behind the lag gauges, off the loop.
	lagRounds, stopLag := newMailbox[[]partProgress](), make(chan struct{})
	goFunc(func() { g.runLagProber(lagRounds, stopLag) })
	defer close(stopLag)

	d := &driver{g: g, ledger: ledgerOps, commits: commits, lag: lagRounds, ms: ms}
	if n := g.cfg.ReadsInFlight; n > 0 {
		// Readers: at most one read per partition is under way (the
		// machine's rule), so the queue never blocks the loop.
		parts := 0
		for _, s := range g.mc.subs {
			parts += len(s.parts)
		}
		d.reads = make(chan *readJob, parts)
		for range min(n, parts) {
			goFunc(func() { g.runReader(d.reads) })
		}
		defer close(d.reads) // before wg.Wait: the readers end after their read
	}
	d.loop(ctx, changed)
	// The committer ends before the final commit, so that no earlier
	// commit it was writing can land after it.
	close(stopCommitter)
	<-committerDone
	return d.stop()
}

// driver carries out the machine's actions for Run.
type driver struct {
	g       *Group
	ledger  *mailbox[ledgerOp]
	commits *mailbox[*commitJob]
	lag     *mailbox[[]partProgress]
	ms      *membership   // nil: a single node
	reads   chan *readJob // nil: reads are made on the loop
	acts    []action
	res     []result
}

// loop runs until the drain is complete or its budget is used up.
func (d *driver) loop(ctx context.Context, changed <-chan struct{}) {
	g, mc := d.g, d.g.mc
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var drainDeadline <-chan time.Time
	done := ctx.Done()
	for {
		now := time.Now()
		mc.fetches(now)
		d.run(now)
		mc.work(now)
		d.run(now)
		g.report()
		if mc.finished() {
			break
		}
		resetTimer(timer, mc.nextWake(now).Sub(now))
		var dataCh <-chan struct{}
		if mc.wantsData() {
			dataCh = changed
		}
		select {
		case ev := <-g.inbox:
			ev.apply(g, time.Now()) // not now: the loop may have slept long since
			// Take whatever else is queued before doing a round of work.
			for more := true; more; {
				select {
				case ev := <-g.inbox:
					ev.apply(g, time.Now())
				default:
					more = false
				}
			}
		case <-g.results.signal:
			d.applyResults(time.Now())
		case <-dataCh:
			mc.dataChanged()
		case <-timer.C:
		case <-done:
			g.log.Info("draining: no new deliveries; waiting for in-flight ones", "in_flight", mc.outstanding(), "budget", g.cfg.DrainTimeout)
			mc.drain()
			done = nil
			drainDeadline = time.After(g.cfg.DrainTimeout)
		case <-drainDeadline:
			g.log.Warn("drain budget used up: unsettled deliveries will be redelivered after restart", "in_flight", mc.outstanding())
			return
		}
	}
}

// run carries out the actions the machine emitted, feeding synchronous
// answers (reads, unsent frames) straight back; those may emit more.
func (d *driver) run(now time.Time) {
	mc := d.g.mc
	for len(mc.acts) > 0 {
		d.acts = mc.take(d.acts)
		for i := range d.acts {
			d.do(now, &d.acts[i])
		}
		clear(d.acts)
	}
}

func (d *driver) do(now time.Time, a *action) {
	g, mc := d.g, d.g.mc
	switch a.kind {
	case actFetch:
		if d.reads != nil {
			g.met.DeliveryReadsInFlight.WithLabelValues(g.cfg.Name).Inc()
			d.reads <- &readJob{s: a.s, p: a.p, offset: a.offset, maxBytes: a.maxBytes}
			return
		}
		recs, err := g.eng.Fetch(a.s.cfg.Topic, a.p.num, a.offset, a.maxBytes, nil)
		mc.fetched(now, a.s, a.p, a.offset, recs, err)
	case actSend:
		if !a.c.send(a.frame, a.fenceAt) {
			mc.frameUnsent(now, a.c, a.frame)
		}
	case actClaim:
		d.ledger.put(ledgerOp{claim: a.claim})
	case actLedgerWrite:
		d.ledger.put(ledgerOp{s: a.s, ops: a.writes})
	case actDeadLetter:
		j := a.dl
		// done may run on this goroutine (a batch the log refuses at once)
		// or on the appender's: either way it only puts into a mailbox.
		g.eng.Produce(j.s.cfg.DLQTopic, j.partition, []engine.Record{j.rec}, func(_ int64, err error) {
			j.err = err
			g.results.put(result{dl: j})
		})
	case actCommit:
		j := &commitJob{s: a.s, pos: a.pos, gens: a.gens, handovers: a.handovers, reset: a.reset}
		if mc.cluster {
			j.inc = make(map[int32]uint64, len(a.pos))
			for num := range a.pos {
				j.inc[num] = a.s.parts[num].inc
			}
		}
		d.commits.put(j)
	case actTrace:
		g.traced(a.s.cfg.Topic, a.trace)
	case actSpan:
		recordSpan(g.cfg.Tracer, a.span)
	case actConnected:
		if d.ms != nil {
			d.ms.consumersChanged(mc)
		}
	case actGauges:
		g.refreshGauges()
		if a.lag != nil {
			d.lag.put(a.lag)
		}
	}
}

// applyResults feeds the answers of asynchronous actions to the machine.
func (d *driver) applyResults(now time.Time) {
	mc := d.g.mc
	d.res = d.g.results.take(d.res[:0])
	for _, r := range d.res {
		switch {
		case r.claim != nil:
			mc.claimed(now, r.claim) // counts the answer (claimsInFlight)
		case r.read != nil:
			d.g.met.DeliveryReadsInFlight.WithLabelValues(d.g.cfg.Name).Dec()
			mc.fetched(now, r.read.s, r.read.p, r.read.offset, r.read.recs, r.read.err)
		case r.dl != nil:
			mc.deadLettered(now, r.dl)
		case r.commit != nil && mc.cluster:
			mc.committedCluster(now, r.commit)
		case r.commit != nil:
			mc.committedPositions(r.commit)
			if r.commit.reset != nil {
				r.commit.reset.done <- r.commit.err
			}
		case r.assign != nil:
			mc.assigned(now, r.assign)
		case r.lagged:
			mc.lagged()
		}
	}
	clear(d.res)
}

// stop applies the answers that arrived, hands the last settlements to
// the ledger pipeline and writes the final positions (the committer has
// stopped).
func (d *driver) stop() error {
	d.applyResults(time.Now())
	d.run(time.Now()) // ledger writes of the last answers
	mc := d.g.mc
	mc.flushLedger()
	d.run(time.Now())
	d.g.report()
	return d.g.finalCommit()
}

func resetTimer(t *time.Timer, dur time.Duration) {
	t.Stop()
	t.Reset(max(dur, 0))
}

// readJob is one read made on a reader (GroupConfig.ReadsInFlight) and
// its answer, applied on the loop.
type readJob struct {
	s        *sub
	p        *part
	offset   int64
	maxBytes int
	recs     []engine.Record
	err      error
}

// runReader makes the reads queued on jobs until it is closed, handing
// each answer back to the loop.
func (g *Group) runReader(jobs <-chan *readJob) {
	for j := range jobs {
		j.recs, j.err = g.eng.Fetch(j.s.cfg.Topic, j.p.num, j.offset, j.maxBytes, nil)
		g.results.put(result{read: j})
	}
}

// commitJob is one topic's positions to write (an actCommit) and its answer.
type commitJob struct {
	s   *sub
	pos map[int32]engine.Position
	err error
	// In a cluster: each partition's generation and incarnation, the
	// answer per partition, and the revoked partitions to hand over.
	gens      map[int32]uint64
	inc       map[int32]uint64
	errs      map[int32]error
	handovers []*handover
	reset     *resetJob // the commit of an offset reset (single node)
}

// runCommitter writes positions off the loop (an fsync per topic) and
// reports each result in the results mailbox.
func (g *Group) runCommitter(jobs *mailbox[*commitJob], stop <-chan struct{}) {
	var batch []*commitJob
	for {
		select {
		case <-jobs.signal:
		case <-stop:
			return
		}
		batch = jobs.take(batch[:0])
		for _, j := range batch {
			if g.cfg.Coordinator != nil {
				g.commitCluster(context.Background(), j)
			} else {
				j.err = g.eng.CommitPositions(g.cfg.Name, j.s.cfg.Topic, j.pos)
			}
			g.results.put(result{commit: j})
		}
		clear(batch)
	}
}

// finalCommit writes every topic's positions synchronously.
func (g *Group) finalCommit() error {
	if g.mc.cluster {
		return g.finalClusterCommit()
	}
	var first error
	for _, s := range g.mc.subs {
		pos, changed := g.mc.positions(s)
		if !changed {
			continue
		}
		if err := g.eng.CommitPositions(g.cfg.Name, s.cfg.Topic, pos); err != nil {
			g.met.CommitErrors.WithLabelValues(g.cfg.Name, s.cfg.Topic).Inc()
			if first == nil {
				first = err
			}
			continue
		}
		for _, p := range s.parts {
			p.committed = pos[p.num]
		}
	}
	return first
}

// finalClusterCommit is finalCommit's part in a cluster: each owned
// partition's position through the coordinator (a refused one is lost to
// the next owner, which redelivers what this member finished after it).
func (g *Group) finalClusterCommit() error {
	var errs []error
	for _, s := range g.mc.subs {
		pos, changed := g.mc.positions(s)
		if !changed {
			continue
		}
		for num, x := range pos {
			if x.Equal(s.parts[num].committed) {
				delete(pos, num)
			}
		}
		j := &commitJob{s: s, pos: pos, gens: gensOf(s, pos)}
		g.commitCluster(context.Background(), j)
		for num, err := range j.errs {
			if err != nil {
				g.met.CommitErrors.WithLabelValues(g.cfg.Name, s.cfg.Topic).Inc()
				errs = append(errs, fmt.Errorf("final commit of %s/%d through the group's coordinator: %w", s.cfg.Topic, num, err))
				continue
			}
			s.parts[num].committed = pos[num]
		}
	}
	return errors.Join(errs...)
}

func gensOf(s *sub, pos map[int32]engine.Position) map[int32]uint64 {
	gens := make(map[int32]uint64, len(pos))
	for num := range pos {
		gens[num] = s.parts[num].gen
	}
	return gens
}
