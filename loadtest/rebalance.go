package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// The rebalance scenario (issue 9): a cluster whose sidecars each have an
// app consuming one group, under a steady load, and a rolling restart of
// the sidecars. The driver here does the restarts and records what
// happened; pause.go turns the record into the figures.

const (
	// groupSettleWithin bounds the wait for the group to settle: at the
	// start (the groups topic is created on first use, then every member
	// joins) and after each restart.
	groupSettleWithin = 90 * time.Second
	// freshWithin bounds one settle check: every partition delivered after
	// the check began.
	freshWithin = 3 * time.Second
	// reconnectWithin bounds the wait for a restarted sidecar's app to
	// consume through it again (the SDK's reconnect backoff reaches 5 s).
	reconnectWithin = 60 * time.Second
	// stopGrace bounds a SIGTERM'd sidecar's drain and exit.
	stopGrace = 30 * time.Second
)

// RestartResult is one restart of a rebalance run.
type RestartResult struct {
	Node        int     `json:"node"`         // 1-based
	StopMs      float64 `json:"stop_ms"`      // SIGTERM → the process exited (drain, commit, leave)
	ReadyMs     float64 `json:"ready_ms"`     // started again → /readyz
	ReconnectMs float64 `json:"reconnect_ms"` // ready → its app's consumer connected again
	SettleMs    float64 `json:"settle_ms"`    // connected → every node's app delivering its share
	// Moved: partitions that moved in this restart's window; the longest
	// pauses of an unmoved and of a moved partition there, and which.
	Moved             int     `json:"moved"`
	MaxPauseUnmovedMs float64 `json:"max_pause_unmoved_ms"`
	UnmovedPartition  int32   `json:"unmoved_partition"` // -1: no unmoved partition paused
	MaxPauseMovedMs   float64 `json:"max_pause_moved_ms"`
	MovedPartition    int32   `json:"moved_partition"` // -1: none
}

// timeline records what the pause accounting needs: when each message was
// acknowledged to its producer (and its partition), and every delivery to
// an app. Times are offsets from origin (monotonic clock).
type timeline struct {
	origin time.Time
	mu     sync.Mutex
	acks   []ackEvent
	dels   []deliveryEvent
}

func newTimeline() *timeline { return &timeline{origin: time.Now()} }

func (tl *timeline) at(t time.Time) time.Duration { return t.Sub(tl.origin) }

// acked records the messages first, first+1, ... of one answered request.
func (tl *timeline) acked(first int64, results []*spoolv1.PublishResult, t time.Time) {
	at := tl.at(t)
	tl.mu.Lock()
	for i, r := range results {
		tl.acks = append(tl.acks, ackEvent{seq: uint64(first) + uint64(i), part: r.GetPartition(), at: at})
	}
	tl.mu.Unlock()
}

func (tl *timeline) delivered(seq uint64, part int32, node int, t time.Time) {
	at := tl.at(t)
	tl.mu.Lock()
	tl.dels = append(tl.dels, deliveryEvent{seq: seq, part: part, node: node, at: at})
	tl.mu.Unlock()
}

func (tl *timeline) events() ([]ackEvent, []deliveryEvent) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.acks), slices.Clone(tl.dels)
}

// consumerNodes are the nodes whose apps consume, ascending.
func consumerNodes(cs *consStats) []int {
	ns := slices.Clone(cs.node)
	slices.Sort(ns)
	return slices.Compact(ns)
}

// awaitShares waits until the group has settled over the nodes with a
// consumer: every partition was delivered after a check began, and, by
// the latest delivery of each partition, each of those nodes delivers at
// least its share (partitions / nodes, rounded down). probe, when set,
// publishes one message to every partition as each check begins (for
// when no load runs).
func awaitShares(ctx context.Context, cs *consStats, parts int, within time.Duration, probe func(ctx context.Context, round int) error) error {
	nodes := consumerNodes(cs)
	share := parts / len(nodes)
	deadline := time.Now().Add(within)
	var found string
	var probeErr error // the last round's, if its probes failed
	for round := 0; ; round++ {
		began := time.Now()
		if probe != nil {
			probeErr = probe(ctx, round)
		}
		fresh := func() (stale []int) {
			for p := range parts {
				if at, _, ok := cs.lastDelivery(p); !ok || at.Before(began) {
					stale = append(stale, p)
				}
			}
			return stale
		}
		for len(fresh()) > 0 && time.Since(began) < freshWithin && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond) // sleep-ok: polling the consumers' deliveries
		}
		if stale := fresh(); len(stale) > 0 {
			found = fmt.Sprintf("partitions %v not delivered within %s", stale, freshWithin)
		} else {
			count := map[int]int{}
			for p := range parts {
				_, n, _ := cs.lastDelivery(p)
				count[n]++
			}
			short := false
			for _, n := range nodes {
				short = short || count[n] < share
			}
			if !short {
				return nil
			}
			found = fmt.Sprintf("partitions delivered per node %v, want at least %d on each of nodes %v (0-based)", count, share, nodes)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if probeErr != nil {
				found += fmt.Sprintf("; probes: %v", probeErr)
			}
			return fmt.Errorf("loadtest: the group did not settle within %s: %s", within, found)
		}
		time.Sleep(200 * time.Millisecond) // sleep-ok: between checks
	}
}

// settleGroup waits, before any load, until every app consumes its share
// of the partitions (probe messages show who delivers what).
func settleGroup(ctx context.Context, addrs []string, sc *Scenario, cs *consStats) error {
	probe := func(ctx context.Context, round int) error {
		return probeAll(ctx, addrs, sc, 10*time.Second, fmt.Sprintf("settle-%d", round))
	}
	return awaitShares(ctx, cs, sc.Partitions, groupSettleWithin, probe)
}

// consumerConnected asks a sidecar whether an app consumes the group through it.
func consumerConnected(ctx context.Context, adminAddr string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	resp, err := spoolv1.NewAdminServiceClient(conn).ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: groupName})
	if err != nil {
		return false, err
	}
	for _, g := range resp.GetGroups() {
		if g.GetTopic() == topicName && g.GetConsumers() > 0 {
			return true, nil
		}
	}
	return false, nil
}

// rebalance restarts sc.Restarts sidecars one after another under the
// load: each is stopped with SIGTERM (it drains, commits and leaves the
// group), started again on its data dir, and waited for — ready, its app's
// consumer connected again, the group settled with it — then the load runs
// steady for sc.RestartGap before the next.
type rebalance struct {
	nodes []*sidecarProc
	sc    *Scenario
	cs    *consStats

	stops    []time.Time // SIGTERM of each restart
	restarts []RestartResult
	ledger   ledgerCounters // each restarted node's counters, read before its SIGTERM
	errs     []error
}

func (rb *rebalance) run(ctx context.Context) {
	if !sleepCtx(ctx, rb.sc.RestartGap) {
		rb.errs = append(rb.errs, ctx.Err())
		return
	}
	for k := range rb.sc.Restarts {
		if err := rb.restart(ctx, k); err != nil {
			rb.errs = append(rb.errs, err)
			return
		}
		if !sleepCtx(ctx, rb.sc.RestartGap) {
			rb.errs = append(rb.errs, ctx.Err())
			return
		}
	}
}

// reconnects counts the streams the consumers of node k opened again.
func (rb *rebalance) reconnects(k int) int64 {
	var n int64
	for i, node := range rb.cs.node {
		if node == k {
			n += rb.cs.sdk[i].Reconnects.Load()
		}
	}
	return n
}

func (rb *rebalance) restart(ctx context.Context, k int) error {
	p := rb.nodes[k]
	if lc, err := scrapeLedgerCounters(p.adminAddr); err != nil {
		rb.errs = append(rb.errs, fmt.Errorf("node %d before its restart: %w", k+1, err))
	} else {
		rb.ledger.add(lc)
	}
	base := rb.reconnects(k)
	stopAt := time.Now()
	rb.stops = append(rb.stops, stopAt)
	if err := p.stop(stopGrace); err != nil {
		return fmt.Errorf("restart of node %d: %w", k+1, err)
	}
	startAt := time.Now()
	if err := p.launch(); err != nil {
		return fmt.Errorf("restart of node %d: %w", k+1, err)
	}
	if err := p.waitReady(ctx, readyWithin); err != nil {
		return fmt.Errorf("restart of node %d: %w", k+1, err)
	}
	readyAt := time.Now()
	deadline := readyAt.Add(reconnectWithin)
	for {
		if rb.reconnects(k) > base {
			ok, err := consumerConnected(ctx, p.adminAddr)
			if err != nil {
				return fmt.Errorf("restart of node %d: %w", k+1, err)
			}
			if ok {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("restart of node %d: its app's consumer did not connect again within %s of /readyz; the node's log:\n%s", k+1, reconnectWithin, p.logTail())
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling the SDK's reconnect counter
	}
	connectedAt := time.Now()
	if err := awaitShares(ctx, rb.cs, rb.sc.Partitions, groupSettleWithin, nil); err != nil {
		return fmt.Errorf("restart of node %d: %w", k+1, err)
	}
	settledAt := time.Now()
	ms := func(a, b time.Time) float64 { return round(float64(b.Sub(a))/float64(time.Millisecond), 1) }
	rr := RestartResult{Node: k + 1, StopMs: ms(stopAt, startAt), ReadyMs: ms(startAt, readyAt), ReconnectMs: ms(readyAt, connectedAt), SettleMs: ms(connectedAt, settledAt)}
	rb.restarts = append(rb.restarts, rr)
	fmt.Fprintf(os.Stderr, "loadtest: rebalance: node %d stopped in %.0f ms, ready %.0f ms after its start, its app connected %.0f ms later, the group settled %.0f ms after that\n",
		k+1, rr.StopMs, rr.ReadyMs, rr.ReconnectMs, rr.SettleMs)
	return nil
}

// pauseFigures applies the pause accounting to the run: the steady window
// (the load's start to the first SIGTERM), then one window per restart
// (its SIGTERM to the next one's; the last one's runs past the end of the
// observation, end). It fills the restarts' figures and returns the
// maxima: steady, unmoved and moved (over the restarts).
func (rb *rebalance) pauseFigures(tl *timeline, loadStart, end time.Time) (steady, unmoved, moved float64, errs []error) {
	if len(rb.stops) == 0 {
		return 0, 0, 0, []error{errors.New("no restart was made: no pause figures")}
	}
	windows := []pauseWindow{{node: -1, from: tl.at(loadStart), to: tl.at(rb.stops[0])}}
	for i, s := range rb.stops {
		to := maxDur
		if i+1 < len(rb.stops) {
			to = tl.at(rb.stops[i+1])
		}
		windows = append(windows, pauseWindow{node: i, from: tl.at(s), to: to})
	}
	acks, dels := tl.events()
	wps := accountPauses(rb.sc.Partitions, acks, dels, windows, tl.at(end))
	toMs := func(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 1) }
	steady = toMs(max(wps[0].maxUnmoved.pause, wps[0].maxMoved.pause))
	for i, wp := range wps {
		if len(wp.stuck) > 0 {
			errs = append(errs, fmt.Errorf("partitions %v had acknowledged messages never delivered (window %d)", wp.stuck, i))
		}
		if i == 0 {
			continue
		}
		unmoved = max(unmoved, toMs(wp.maxUnmoved.pause))
		moved = max(moved, toMs(wp.maxMoved.pause))
		if i-1 < len(rb.restarts) {
			rr := &rb.restarts[i-1]
			rr.Moved = len(wp.moved)
			rr.MaxPauseUnmovedMs, rr.UnmovedPartition = toMs(wp.maxUnmoved.pause), wp.maxUnmoved.part
			rr.MaxPauseMovedMs, rr.MovedPartition = toMs(wp.maxMoved.pause), wp.maxMoved.part
		}
	}
	return steady, unmoved, moved, errs
}

// sleepCtx sleeps d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
