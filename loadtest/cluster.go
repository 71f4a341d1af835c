package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Cluster runs (scenario nodes > 1): sc.Nodes spoold processes on
// 127.0.0.1, the first bootstrapping the cluster and the others joining it,
// each with its own app and admin port. The harness never looks inside
// spoold: which node leads a partition is found through the admin API
// (see leaders).

const (
	// placeWithin bounds the wait until every partition has taken a publish
	// after the cluster formed (placement, then one election per group).
	placeWithin = 120 * time.Second
	// probeIDPrefix marks messages the harness writes to find leaders or to
	// wait for placement; consumers skip them (they are not in the
	// acknowledged set of the run).
	probeIDPrefix = "probe-"
	// probeEvery is how often each partition is published to during a
	// failover round: the resolution of kill → first new ack.
	probeEvery = 10 * time.Millisecond
	// failoverWithin bounds one round: a partition of the killed node still
	// not writable after it counts as this long and the round as timed out.
	failoverWithin = 30 * time.Second
	// probeTimeout bounds one probe publish.
	probeTimeout = 20 * time.Second
	// stopWindow is how long a node is stopped (SIGSTOP) to find what it
	// leads: well under raft's election timeout (10 ticks of 100 ms), so no
	// election follows, and well over a commit on this machine.
	stopWindow = 300 * time.Millisecond
)

// startNodes starts the spoold processes of a run: one for a single-node
// scenario, else sc.Nodes forming a cluster (node 1 bootstraps, the others
// join node 1), each ready (/readyz: a member) before the next starts. On
// error the processes already started are returned too, for the caller to
// kill.
func startNodes(ctx context.Context, bin, base string, sc *Scenario, redisAddr string) ([]*sidecarProc, error) {
	if sc.Nodes <= 1 {
		p, err := startSidecar(ctx, bin, base, sc, redisAddr)
		if err != nil {
			return nil, err
		}
		return []*sidecarProc{p}, nil
	}
	var nodes []*sidecarProc
	join := ""
	for i := range sc.Nodes {
		nd, err := newNode(base, i, true, join, sc.ReplicationFactor)
		if err != nil {
			return nodes, err
		}
		p, err := startNode(ctx, bin, sc, nd, redisAddr)
		if err != nil {
			return nodes, fmt.Errorf("loadtest: cluster node %d: %w", i+1, err)
		}
		nodes = append(nodes, p)
		if i == 0 {
			join = p.clusterAddr
		}
	}
	return nodes, nil
}

func appAddrs(nodes []*sidecarProc) []string {
	out := make([]string, len(nodes))
	for i, p := range nodes {
		out[i] = p.appAddr
	}
	return out
}

// stopAll sends SIGTERM to every live node at once (one at a time, the last
// ones would lose their quorum while draining) and waits for each.
func stopAll(nodes []*sidecarProc, grace time.Duration) []error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, p := range nodes {
		if !p.alive() {
			continue
		}
		wg.Go(func() { errs[i] = p.stop(grace) })
	}
	wg.Wait()
	var out []error
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("node %d: %w", i+1, err))
		}
	}
	return out
}

// dialAll opens one gRPC client connection per address (gRPC reconnects by
// itself after a node restarts).
func dialAll(addrs []string) ([]spoolv1.PublisherServiceClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	var out []spoolv1.PublisherServiceClient
	for _, a := range addrs {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
		out = append(out, spoolv1.NewPublisherServiceClient(c))
	}
	return out, closeAll, nil
}

// publishOne publishes one message to one partition and waits for its ack.
func publishOne(ctx context.Context, c spoolv1.PublisherServiceClient, part int32, id string, payload []byte) error {
	resp, err := c.Publish(ctx, &spoolv1.PublishRequest{Topic: topicName, Messages: []*spoolv1.PublishMessage{
		{Id: id, Payload: payload, Partition: &part},
	}})
	if err != nil {
		return err
	}
	if len(resp.GetResults()) != 1 {
		return fmt.Errorf("publish: %d results for 1 message", len(resp.GetResults()))
	}
	return nil
}

// warmup publishes one probe message to every partition (partition p
// through addrs[p % len(addrs)]), retrying each until it is acknowledged or
// within passes: afterwards the topic is placed and every partition has a
// leader that the sidecars found.
func warmup(ctx context.Context, addrs []string, sc *Scenario, within time.Duration) error {
	return probeAll(ctx, addrs, sc, within, "warm")
}

// probeAll publishes one probe message to every partition as warmup
// describes; tag makes the ids of one round of probes differ from
// another's (the ledger would take a probe id seen before for a redelivery).
func probeAll(ctx context.Context, addrs []string, sc *Scenario, within time.Duration, tag string) error {
	clients, closeAll, err := dialAll(addrs)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	parts := make(chan int32)
	go func() {
		defer close(parts)
		for p := range int32(sc.Partitions) {
			select {
			case parts <- p:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	payload := make([]byte, 16)
	for range min(32, sc.Partitions) {
		wg.Go(func() {
			for p := range parts {
				var last error
				for attempt := 0; ; attempt++ {
					actx, acancel := context.WithTimeout(ctx, 5*time.Second)
					last = publishOne(actx, clients[int(p)%len(clients)], p, fmt.Sprintf("%s%s-%d-%d", probeIDPrefix, tag, p, attempt), payload)
					acancel()
					if last == nil {
						break
					}
					select {
					case <-ctx.Done():
						err := fmt.Errorf("loadtest: partition %d took no publish within %s after the cluster formed: %w", p, within, last)
						firstErr.CompareAndSwap(nil, &err)
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		})
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return *e
	}
	return ctx.Err()
}

// failover runs sc.Rounds rounds of: find what each node leads, kill -9 the
// node leading the most partitions, measure until every partition it led
// has acknowledged a publish sent after the kill, restart it.
type failover struct {
	nodes []*sidecarProc
	sc    *Scenario
	ps    *pubStats
	pp    procs

	clients []spoolv1.PublisherServiceClient
	next    atomic.Int64 // next message sequence number

	start, end phase // wall time only: CPU is not summed over killed processes
	times      *histogram
	roundsMs   []float64
	led        []int
	timeouts   int
	errs       []error
}

func (f *failover) run(ctx context.Context) {
	f.times = new(histogram)
	f.start = phase{t: time.Now()}
	defer func() { f.end = phase{t: time.Now()} }()
	var closeAll func()
	var err error
	if f.clients, closeAll, err = dialAll(appAddrs(f.nodes)); err != nil {
		f.errs = append(f.errs, err)
		return
	}
	defer closeAll()
	for round := range f.sc.Rounds {
		if ctx.Err() != nil {
			f.errs = append(f.errs, ctx.Err())
			return
		}
		led, err := f.leaders(ctx)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("round %d: %w", round+1, err))
			return
		}
		victim := round % len(f.nodes)
		for i := range f.nodes { // the node leading the most partitions; ties: round robin
			j := (round + i) % len(f.nodes)
			if len(led[j]) > len(led[victim]) {
				victim = j
			}
		}
		parts := led[victim]
		if len(parts) == 0 { // no leader found (should not happen): wait for every partition
			f.errs = append(f.errs, fmt.Errorf("round %d: no node was found leading a partition; measured every partition", round+1))
			for p := range int32(f.sc.Partitions) {
				parts = append(parts, p)
			}
		}
		ms, timedOut := f.round(ctx, victim, parts)
		f.roundsMs = append(f.roundsMs, round3(ms))
		f.led = append(f.led, len(led[victim]))
		f.times.record(time.Duration(ms * float64(time.Millisecond)))
		if timedOut {
			f.timeouts++
			f.errs = append(f.errs, fmt.Errorf("round %d: a partition led by killed node %d took no new publish within %s; node logs in %s", round+1, victim+1, failoverWithin, f.nodes[victim].dir))
		}
		fmt.Fprintf(os.Stderr, "loadtest: failover round %d: killed node %d (led %d of %d partitions): %.0f ms\n", round+1, victim+1, len(led[victim]), f.sc.Partitions, ms)
		if err := f.restart(ctx, victim); err != nil {
			f.errs = append(f.errs, fmt.Errorf("round %d: restart node %d: %w", round+1, victim+1, err))
			return
		}
	}
}

func round3(x float64) float64 { return round(x, 3) }

// leaders finds which partitions each node leads: from the admin API
// (ClusterStatus for each node's id, ListTopics for each partition's
// leader), else, when that fails, from outside (detectLeaders). The
// SIGSTOP probe of detectLeaders over-reports: it often found the stopped
// node "leading" all 8 partitions, and rounds then killed a node that led
// none at the kill (recovered within one probe, 20–40 ms).
func (f *failover) leaders(ctx context.Context) (map[int][]int32, error) {
	if led, err := f.leadersFromAdmin(ctx); err == nil {
		return led, nil
	}
	return f.detectLeaders(ctx)
}

// leadersFromAdmin asks every node for its id and the first for each
// partition's leader; every partition must have one.
func (f *failover) leadersFromAdmin(ctx context.Context) (map[int][]int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	index := map[string]int{}
	var admins []spoolv1.AdminServiceClient
	for i, n := range f.nodes {
		conn, err := grpc.NewClient(n.adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		a := spoolv1.NewAdminServiceClient(conn)
		admins = append(admins, a)
		st, err := a.ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil {
			return nil, err
		}
		index[st.GetNodeId()] = i
	}
	lt, err := admins[0].ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		return nil, err
	}
	led := map[int][]int32{}
	found := 0
	for _, t := range lt.GetTopics() {
		if t.GetName() != topicName {
			continue
		}
		for _, p := range t.GetPartitions() {
			i, ok := index[p.GetLeader()]
			if !ok {
				return nil, fmt.Errorf("partition %d: leader %q is not a node of the run", p.GetPartition(), p.GetLeader())
			}
			led[i] = append(led[i], p.GetPartition())
			found++
		}
	}
	if found != f.sc.Partitions {
		return nil, fmt.Errorf("%d of %d partitions have a known leader", found, f.sc.Partitions)
	}
	return led, nil
}

// detectLeaders finds which partitions each node leads, from outside: the
// node is stopped (SIGSTOP) for stopWindow while every partition is
// published to through another node; a partition whose publish is not
// acknowledged before the node continues (SIGCONT) is led by it — a
// stopped follower does not hold up a commit, a stopped leader does.
func (f *failover) detectLeaders(ctx context.Context) (map[int][]int32, error) {
	led := map[int][]int32{}
	payload := make([]byte, 16)
	for x, p := range f.nodes {
		via := f.clients[(x+1)%len(f.nodes)]
		pid := p.pid()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("stop node %d: %w", x+1, err)
		}
		stoppedAt := time.Now()
		done := make([]atomic.Int64, f.sc.Partitions) // ack time, ns
		var wg sync.WaitGroup
		for part := range int32(f.sc.Partitions) {
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, probeTimeout)
				defer cancel()
				id := fmt.Sprintf("%slead-%d-%d-%d", probeIDPrefix, stoppedAt.UnixNano(), x, part)
				if publishOne(pctx, via, part, id, payload) == nil {
					done[part].Store(time.Now().UnixNano())
				}
			})
		}
		time.Sleep(stopWindow) // sleep-ok: the node stays stopped this long
		contAt := time.Now().UnixNano()
		err := syscall.Kill(pid, syscall.SIGCONT)
		wg.Wait()
		if err != nil {
			return nil, fmt.Errorf("continue node %d: %w", x+1, err)
		}
		for part := range int32(f.sc.Partitions) {
			if d := done[part].Load(); d == 0 || d >= contAt {
				led[x] = append(led[x], part)
			}
		}
	}
	return led, nil
}

// round probes every partition every probeEvery through the nodes other
// than victim, kills victim and returns the time from the kill until each
// of parts has acknowledged a publish sent after it (the largest of them).
func (f *failover) round(ctx context.Context, victim int, parts []int32) (ms float64, timedOut bool) {
	var survivors []spoolv1.PublisherServiceClient
	for i, c := range f.clients {
		if i != victim {
			survivors = append(survivors, c)
		}
	}
	var killNs atomic.Int64
	firstAck := make([]atomic.Int64, f.sc.Partitions) // ns of the first ack of a publish sent after the kill
	pctx, stopProbing := context.WithCancel(ctx)
	defer stopProbing()
	var inflight sync.WaitGroup
	var tickers sync.WaitGroup
	for part := range int32(f.sc.Partitions) {
		tickers.Go(func() {
			t := time.NewTicker(probeEvery)
			defer t.Stop()
			for n := 0; ; n++ {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
				}
				seq := f.next.Add(1) - 1
				if seq >= int64(f.sc.Messages) {
					err := fmt.Errorf("ran out of message ids (messages = %d): raise messages", f.sc.Messages)
					f.ps.firstErr.CompareAndSwap(nil, &err)
					return
				}
				inflight.Go(func() { f.probe(ctx, survivors[n%len(survivors)], part, seq, &killNs, &firstAck[part]) })
			}
		})
	}
	// Steady state first: every partition is being written when the kill comes.
	time.Sleep(500 * time.Millisecond) // sleep-ok: probes run before the kill
	kill := time.Now()
	killNs.Store(kill.UnixNano())
	_ = f.nodes[victim].cmd.Process.Signal(syscall.SIGKILL)
	deadline := kill.Add(failoverWithin)
	for {
		all := true
		for _, p := range parts {
			if firstAck[p].Load() == 0 {
				all = false
				break
			}
		}
		if all || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Millisecond) // sleep-ok: polling the probes' results
	}
	for _, p := range parts {
		d := failoverWithin
		if a := firstAck[p].Load(); a != 0 {
			d = time.Duration(a - kill.UnixNano())
		} else {
			timedOut = true
		}
		ms = max(ms, float64(d)/float64(time.Millisecond))
	}
	stopProbing()
	tickers.Wait()
	inflight.Wait() // bounded by probeTimeout
	<-f.nodes[victim].exited
	return ms, timedOut
}

// probe publishes message seq to partition part; an ack of a publish sent
// after the kill (killNs set before it was sent) may be the partition's
// first new ack.
func (f *failover) probe(ctx context.Context, c spoolv1.PublisherServiceClient, part int32, seq int64, killNs, firstAck *atomic.Int64) {
	payload := make([]byte, f.sc.MessageBytes)
	sent := time.Now()
	binary.LittleEndian.PutUint64(payload[0:8], uint64(seq))
	binary.LittleEndian.PutUint64(payload[8:16], uint64(sent.UnixNano()))
	afterKill := killNs.Load() != 0
	f.ps.sent.Add(1)
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := publishOne(pctx, c, part, strconv.FormatInt(seq, 10), payload); err != nil {
		f.ps.failed.Add(1) // expected while the partition has no leader: may or may not be stored
		return
	}
	now := time.Now()
	f.ps.acked.add(uint64(seq))
	f.ps.ackedN.Add(1)
	f.ps.lat.record(now.Sub(sent))
	if afterKill {
		firstAck.CompareAndSwap(0, now.UnixNano())
	}
}

// restart starts the killed node again (same config and data dir), waits
// for /readyz and for every partition to take a publish through it, then
// lets its replicas catch up for a moment.
func (f *failover) restart(ctx context.Context, i int) error {
	p := f.nodes[i]
	if err := p.launch(); err != nil {
		return err
	}
	if err := p.waitReady(ctx, readyWithin); err != nil {
		return err
	}
	if err := warmup(ctx, []string{p.appAddr}, f.sc, placeWithin); err != nil {
		return errors.Join(err, fmt.Errorf("node %d's log:\n%s", i+1, p.logTail()))
	}
	time.Sleep(time.Second) // sleep-ok: the restarted replicas catch up before the next kill
	return nil
}
