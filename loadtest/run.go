package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Result is the one JSON line a run prints.
type Result struct {
	Scenario   string  `json:"scenario"`
	Mode       string  `json:"mode"`
	MsgsPerS   float64 `json:"msgs_per_s"`
	MBPerS     float64 `json:"mb_per_s"` // payload MiB/s
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	Duplicates int64   `json:"duplicates"`
	Lost       int64   `json:"lost"`
	// TimedOut: the run ended at its deadline (max_duration) before every
	// acknowledged message was handled; lost then counts those not handled
	// yet, late or lost (the run also fails).
	TimedOut           bool    `json:"timed_out,omitempty"`
	Verified           bool    `json:"verified"` // duplicates/lost come from consuming every message
	PublishFailed      int64   `json:"publish_failed"`
	SidecarRSSMBPeak   float64 `json:"sidecar_rss_mb_peak"`
	SidecarRSSMBIdle   float64 `json:"sidecar_rss_mb_idle"`
	SidecarHWMMB       float64 `json:"sidecar_hwm_mb"`     // VmHWM over the whole run (includes backlog and verify phases)
	SidecarRSSMBEnd    float64 `json:"sidecar_rss_mb_end"` // VmRSS when the measured phase ended
	SidecarCPUUsPerMsg float64 `json:"sidecar_cpu_us_per_msg"`
	SidecarCPUCores    float64 `json:"sidecar_cpu_cores"`              // average cores busy in the measured phase
	RedisCPUUsPerMsg   float64 `json:"redis_cpu_us_per_msg,omitempty"` // redis-server's utime+stime over the measured phase per message (redis: true)
	RedisCPUCores      float64 `json:"redis_cpu_cores,omitempty"`
	// From INFO commandstats, per message: the ledger's script calls
	// (messages per call is its batch size), the time redis-server spent
	// running them, and the other commands (the GETs and SETs the scripts
	// run, mostly).
	RedisScriptsPerMsg  float64 `json:"redis_scripts_per_msg,omitempty"`
	RedisScriptUsPerMsg float64 `json:"redis_script_us_per_msg,omitempty"`
	RedisCommandsPerMsg float64 `json:"redis_commands_per_msg,omitempty"`
	// Backend is the log spoold ran on; BrokerCPUUsPerMsg the CPU of its
	// broker (nats-server or Kafka) per message over the measured phase.
	Backend             string  `json:"backend,omitempty"`
	BrokerCPUUsPerMsg   float64 `json:"broker_cpu_us_per_msg,omitempty"`
	LoadtestCPUUsPerMsg float64 `json:"loadtest_cpu_us_per_msg"`
	// ConsumerSDK is the scenario's consumer_sdk; with a consumer program
	// (not go), its processes' utime+stime over the measured phase per
	// message and in cores, and their VmHWM summed, at the end of the phase.
	ConsumerSDK         string  `json:"consumer_sdk"`
	ConsumerCPUUsPerMsg float64 `json:"consumer_cpu_us_per_msg,omitempty"`
	ConsumerCPUCores    float64 `json:"consumer_cpu_cores,omitempty"`
	ConsumerHWMMB       float64 `json:"consumer_hwm_mb,omitempty"`
	Messages            int64   `json:"messages"`
	DurationS           float64 `json:"duration_s"`
	MessageBytes        int     `json:"message_bytes"`
	Producers           int     `json:"producers"`
	PipelineDepth       int     `json:"pipeline_depth"`
	BatchMessages       int     `json:"batch_messages"`
	Partitions          int     `json:"partitions"`
	Fsync               string  `json:"fsync"`
	StorageSync         string  `json:"storage_sync,omitempty"`
	Ordering            string  `json:"ordering"`
	Consumers           int     `json:"consumers"`
	SidecarGOMEMLIMIT   string  `json:"sidecar_gomemlimit,omitempty"`
	SubWindowMessages   int     `json:"sub_window_messages,omitempty"`
	Redis               bool    `json:"redis,omitempty"` // spoold's idempotency ledger was on, in a redis-server started for the run
	DedupeHits          int64   `json:"dedupe_hits"`     // spoold's /metrics at the end of the run (0 without a ledger): spool_dedupe_hits_total
	LedgerErrors        int64   `json:"ledger_errors"`   // spool_ledger_errors_total, all ops
	Undeduped           int64   `json:"undeduped"`       // spool_undeduped_deliveries_total
	ConsumerConcurrency int     `json:"consumer_concurrency"`
	Reconnects          int64   `json:"reconnects"`
	SettleErrors        int64   `json:"settle_errors"`
	GoVersion           string  `json:"go_version"`
	Nproc               int     `json:"nproc"`
	CPU                 string  `json:"cpu"`
	Kernel              string  `json:"kernel"`
	Date                string  `json:"date"`
	// Cluster runs (nodes > 1): the sidecar_* CPU and RSS figures are sums
	// over all spoold processes (SidecarScope says so); NodeCPUCores is each
	// node's share of sidecar_cpu_cores.
	Nodes             int       `json:"nodes,omitempty"`
	ReplicationFactor int       `json:"replication_factor,omitempty"`
	SidecarScope      string    `json:"sidecar_scope,omitempty"`
	NodeCPUCores      []float64 `json:"node_cpu_cores,omitempty"`
	// NodeMessages: with apps on several nodes, the messages each node's
	// apps handled (the group's share of each member).
	NodeMessages []int64 `json:"node_messages,omitempty"`
	// Failover: one entry per round, kill -9 → every partition the killed
	// node led has acknowledged a publish sent after the kill (p50_ms,
	// p99_ms and max_ms are over these).
	FailoverMs      []float64 `json:"failover_ms,omitempty"`
	FailoverRounds  int       `json:"failover_rounds,omitempty"`
	FailoverTimeout int       `json:"failover_timeouts,omitempty"` // rounds with a partition still not writable after failoverWithin
	// LedPartitions: per round, how many partitions the killed node led.
	LedPartitions []int `json:"led_partitions,omitempty"`
	// IdleS (idle mode): seconds of the idle measurement.
	IdleS float64 `json:"idle_s,omitempty"`
	// Rebalance: the longest pause (docs/benchmarks/consumer-groups.md, pause.go) of a
	// partition that did not move and of one that moved, over the
	// restarts, and of any partition in the steady load before the first
	// restart; each restart's figures; producer streams opened again after
	// their sidecar went away.
	MaxPauseUnmovedMs *float64        `json:"max_pause_unmoved_ms,omitempty"`
	MaxPauseMovedMs   *float64        `json:"max_pause_moved_ms,omitempty"`
	MaxPauseSteadyMs  *float64        `json:"max_pause_steady_ms,omitempty"`
	Restarts          []RestartResult `json:"restarts,omitempty"`
	PublishReopened   int64           `json:"publish_reopened,omitempty"`

	// DuplicateSamples describes the first duplicates: stored twice (two
	// offsets) or delivered twice (one offset, attempt > 1).
	DuplicateSamples []string `json:"duplicate_samples,omitempty"`

	Errors []string `json:"errors,omitempty"`
}

const mib = 1 << 20

// phase marks the bounds of a measured phase: wall time and CPU ticks of
// spoold (summed over the nodes of a cluster, and per node), of this
// process and of redis-server (when the run has one).
type phase struct {
	t                       time.Time
	sidecar, harness, redis int64 // CPU clock ticks
	redisCalls, redisUsec   int64 // INFO commandstats: script calls and their time
	redisInner              int64 // INFO commandstats: the other commands
	broker                  int64 // CPU clock ticks of the backend's broker
	consumer                int64 // CPU clock ticks of the consumer programs
	nodes                   []int64
	rssKiB                  int64 // summed over the nodes
}

// procs are the processes whose CPU a phase mark reads.
type procs struct {
	sidecars  []*sidecarProc
	redis     int // 0: none
	redisAddr string
	broker    int   // the backend's broker (0: none)
	consumers []int // consumer programs (consumer_sdk other than go)
}

func (pp procs) pids() []int {
	out := make([]int, len(pp.sidecars))
	for i, p := range pp.sidecars {
		out[i] = p.pid()
	}
	return out
}

func mark(pp procs) (phase, error) {
	ph := phase{nodes: make([]int64, len(pp.sidecars))}
	for i, p := range pp.sidecars {
		c, err := p.cpuTicks()
		if err != nil {
			return phase{}, err
		}
		ph.nodes[i] = c
		ph.sidecar += c
		if p.alive() {
			rss, _, _ := procMem(p.pid())
			ph.rssKiB += rss
		}
	}
	if pp.redis != 0 {
		r, err := procCPU(pp.redis)
		if err != nil {
			return phase{}, fmt.Errorf("loadtest: redis-server: %w", err)
		}
		ph.redis = r
		if ph.redisCalls, ph.redisUsec, ph.redisInner, err = redisCommandStats(pp.redisAddr); err != nil {
			return phase{}, fmt.Errorf("loadtest: redis-server: %w", err)
		}
	}
	if pp.broker != 0 {
		b, err := procCPU(pp.broker)
		if err != nil {
			return phase{}, fmt.Errorf("loadtest: broker: %w", err)
		}
		ph.broker = b
	}
	for _, pid := range pp.consumers {
		c, err := procCPU(pid)
		if err != nil {
			return phase{}, fmt.Errorf("loadtest: consumer program %d: %w", pid, err)
		}
		ph.consumer += c
	}
	h, err := procCPU(os.Getpid())
	ph.harness, ph.t = h, time.Now()
	return ph, err
}

// run starts spoold from bin (one process, or sc.Nodes forming a cluster),
// runs sc against it and returns the result. With profile.Dir set, a CPU
// profile of the measured phase and a heap profile at its end are fetched
// from (the first) spoold's admin port (/debug/pprof).
func run(ctx context.Context, bin, tmp string, sc *Scenario, profile profileSpec) (*Result, error) {
	var rds *redisProc
	redisAddr := ""
	if sc.Redis {
		var err error
		if rds, err = startRedis(ctx, tmp); err != nil {
			return nil, err
		}
		defer func() {
			select {
			case <-rds.exited:
			default:
				rds.kill()
			}
		}()
		redisAddr = rds.addr
	}
	var brk *broker
	if sc.Backend == "jetstream" || sc.Backend == "kafka" {
		var err error
		if brk, err = startBroker(ctx, sc, tmp); err != nil {
			return nil, err
		}
		defer brk.stop()
		sc.brokerStorage = brk.storage
	}
	nodes, err := startNodes(ctx, bin, tmp, sc, redisAddr)
	defer func() {
		for _, p := range nodes {
			if p.alive() {
				p.kill()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	p := nodes[0]
	pp := procs{sidecars: nodes}
	if rds != nil {
		pp.redis, pp.redisAddr = rds.pid(), rds.addr
	}
	if brk != nil {
		pp.broker = brk.pid
	}
	smp := startSampler(pp.pids, 100*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // sleep-ok: let the just-started sidecars settle before calling them idle
	idle, err := mark(pp)
	if err != nil {
		return nil, err
	}
	idleKiB := idle.rssKiB
	if sc.Nodes > 1 {
		// Every partition has a leader (and the topic is placed) before
		// anything is measured: one message per partition, retried.
		if err := warmup(ctx, appAddrs(nodes), sc, placeWithin); err != nil {
			return nil, fmt.Errorf("%w; node 1's log:\n%s", err, p.logTail())
		}
	}

	r := &Result{
		Scenario: sc.Name, Mode: sc.Mode, MessageBytes: sc.MessageBytes, Producers: sc.Producers,
		PipelineDepth: sc.PipelineDepth, BatchMessages: sc.BatchMessages, Partitions: sc.Partitions,
		Fsync: sc.Fsync, StorageSync: sc.StorageSync, Ordering: sc.Ordering, Consumers: sc.Consumers, ConsumerSDK: sc.ConsumerSDK, Redis: sc.Redis, SidecarGOMEMLIMIT: sc.SidecarGOMEMLIMIT, SubWindowMessages: sc.SubWindowMessages, ConsumerConcurrency: sc.ConsumerConcurrency,
		SidecarRSSMBIdle: float64(idleKiB) / 1024,
		GoVersion:        runtime.Version(), Nproc: runtime.NumCPU(), CPU: cpuModel(), Kernel: kernel(),
		Date: time.Now().UTC().Format(time.RFC3339),
	}
	if sc.Nodes > 1 {
		r.Nodes, r.ReplicationFactor = sc.Nodes, sc.ReplicationFactor
		r.SidecarScope = fmt.Sprintf("sum of %d spoold processes", sc.Nodes)
	}
	addrs := appAddrs(nodes)
	var errs []error
	ps := &pubStats{acked: newIDSet(sc.Messages), lat: new(histogram), done: make(chan struct{})}
	cs := newConsStats(sc.Messages, sc.Partitions)
	consCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	// With a consumer program (consumer_sdk other than go), the programs
	// start and connect before the measured phase and subscribe at its
	// start, as the in-process consumer does.
	var progs *procConsumers
	if sc.ConsumerSDK != "go" { // before any publish: drain publishes its backlog first
		ps.sentNs = make([]atomic.Int64, sc.Messages)
		cs.sentNs = ps.sentNs
	}
	defer func() {
		if progs != nil {
			progs.kill() // a no-op once they were stopped
		}
	}()
	startProgs := func() error {
		if sc.ConsumerSDK == "go" {
			return nil
		}
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		if progs, err = startConsumerProcs(ctx, root, tmp, addrs, sc, cs); err != nil {
			return err
		}
		pp.consumers = progs.pids()
		return nil
	}
	consume := func() func() error {
		if progs == nil {
			return consumeAll(consCtx, addrs, sc, cs)
		}
		beginErr := progs.begin()
		return func() error {
			<-consCtx.Done()
			return errors.Join(beginErr, progs.stop())
		}
	}
	var consumerHWMKiB int64
	var waitConsumers func() error
	var start, end phase
	var lat *histogram
	profAddr := "" // no profiles unless asked for
	if profile.Dir != "" {
		profAddr = p.adminAddr
	}
	prof := newProfiler(profAddr, profile, sc.Name)
	measuredPeak := int64(-1)       // peak RSS of the measured phase, when other phases follow it
	var ledgerBefore ledgerCounters // counted by processes stopped before the end (rebalance)

	switch sc.Mode {
	case "publish":
		mctx, cancel := context.WithTimeout(ctx, sc.MaxDuration)
		smp.reset()
		prof.startCPU()
		if start, err = mark(pp); err != nil {
			cancel()
			return nil, err
		}
		publishAll(mctx, addrs, sc, ps)
		end, err = mark(pp)
		cancel()
		if err != nil {
			return nil, err
		}
		measuredPeak = smp.snapshot()
		errs = append(errs, prof.finish()...)
		r.Messages, lat = ps.ackedN.Load(), ps.lat
		if sc.Verify {
			waitConsumers = consumeAll(consCtx, addrs, sc, cs)
			if _, err := waitCovered(ctx, ps, cs, sc.MaxDuration); err != nil {
				errs = append(errs, fmt.Errorf("verify: %w", err))
			}
		}
	case "drain":
		bctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		publishAll(bctx, addrs, sc, ps)
		cancel()
		if ps.ackedN.Load() == 0 {
			return nil, fmt.Errorf("loadtest: backlog: nothing published: %v", errOf(ps))
		}
		time.Sleep(500 * time.Millisecond) // sleep-ok: let group commit and fetch state settle
		if err := startProgs(); err != nil {
			return nil, err
		}
		smp.reset()
		prof.startCPU()
		if start, err = mark(pp); err != nil {
			return nil, err
		}
		waitConsumers = consume()
		t1, err := waitCovered(ctx, ps, cs, sc.MaxDuration)
		if end, err = markEnd(pp, t1, err, &errs); err != nil {
			return nil, err
		}
		if progs != nil {
			consumerHWMKiB = progs.hwmKiB()
		}
		errs = append(errs, prof.finish()...)
		r.Messages, lat = cs.distinct.Load(), cs.lat
	case "e2e":
		if sc.Nodes > 1 {
			// The apps join the group and share the partitions before
			// anything is measured (with one node, consumers start inside
			// the measured phase, as they always did).
			waitConsumers = consumeAll(consCtx, addrs, sc, cs)
			if err := settleGroup(ctx, addrs, sc, cs); err != nil {
				return nil, err
			}
		}
		if err := startProgs(); err != nil {
			return nil, err
		}
		mctx, cancel := context.WithTimeout(ctx, sc.MaxDuration)
		smp.reset()
		prof.startCPU()
		if start, err = mark(pp); err != nil {
			cancel()
			return nil, err
		}
		if waitConsumers == nil {
			waitConsumers = consume()
		}
		go publishAll(mctx, addrs, sc, ps)
		t1, err := waitCovered(ctx, ps, cs, sc.MaxDuration)
		cancel()
		if end, err = markEnd(pp, t1, err, &errs); err != nil {
			return nil, err
		}
		if progs != nil {
			consumerHWMKiB = progs.hwmKiB()
		}
		errs = append(errs, prof.finish()...)
		r.Messages, lat = cs.distinct.Load(), cs.lat
	case "rebalance":
		tl := newTimeline()
		ps.tl, cs.tl, ps.reopen = tl, tl, true
		waitConsumers = consumeAll(consCtx, addrs, sc, cs)
		if err := settleGroup(ctx, addrs, sc, cs); err != nil {
			return nil, err
		}
		smp.reset()
		if start, err = mark(pp); err != nil {
			return nil, err
		}
		loadCtx, stopLoad := context.WithCancel(ctx)
		go publishAll(loadCtx, addrs, sc, ps)
		rb := &rebalance{nodes: nodes, sc: sc, cs: cs}
		rb.run(ctx)
		stopLoad()
		<-ps.done
		errs = append(errs, rb.errs...)
		if ps.sent.Load() >= int64(sc.Messages) {
			errs = append(errs, fmt.Errorf("the load ran out of message ids (messages = %d) before the restarts ended: raise messages", sc.Messages))
		}
		t1, err := waitCovered(ctx, ps, cs, sc.MaxDuration)
		if end, err = markEnd(pp, t1, err, &errs); err != nil {
			return nil, err
		}
		steady, unmoved, moved, perrs := rb.pauseFigures(tl, start.t, time.Now())
		errs = append(errs, perrs...)
		r.MaxPauseSteadyMs, r.MaxPauseUnmovedMs, r.MaxPauseMovedMs = &steady, &unmoved, &moved
		r.Restarts, r.PublishReopened = rb.restarts, ps.reopened.Load()
		r.Messages, lat = cs.distinct.Load(), cs.lat
		ledgerBefore = rb.ledger
	case "idle":
		close(ps.done)
		smp.reset()
		prof.startCPU()
		if start, err = mark(pp); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(sc.IdleDuration):
		}
		if end, err = mark(pp); err != nil {
			return nil, err
		}
		errs = append(errs, prof.finish()...)
		measuredPeak = smp.snapshot()
		lat = new(histogram)
		r.IdleS = round(end.t.Sub(start.t).Seconds(), 3)
	case "failover":
		fo := &failover{nodes: nodes, sc: sc, ps: ps, pp: pp}
		fo.run(ctx)
		close(ps.done)
		errs = append(errs, fo.errs...)
		start, end = fo.start, fo.end
		r.Messages, lat = ps.ackedN.Load(), fo.times
		r.FailoverMs, r.LedPartitions, r.FailoverRounds, r.FailoverTimeout = fo.roundsMs, fo.led, len(fo.roundsMs), fo.timeouts
		if sc.Verify {
			waitConsumers = consumeAll(consCtx, addrs, sc, cs)
			if _, err := waitCovered(ctx, ps, cs, 2*time.Minute); err != nil {
				errs = append(errs, fmt.Errorf("verify: %w", err))
			}
		}
	}
	<-ps.done
	if waitConsumers != nil {
		time.Sleep(200 * time.Millisecond) // a last chance for duplicates to show
		stopConsumers()
		if err := waitConsumers(); err != nil {
			errs = append(errs, fmt.Errorf("consumers: %w", err))
		}
		r.Verified = true
		r.Duplicates = cs.handled.Load() - cs.distinct.Load() + cs.badIDs.Load()
		r.Lost = int64(cs.seen.missing(ps.acked))
		for _, err := range errs {
			r.TimedOut = r.TimedOut || errors.Is(err, errNotCovered)
		}
		r.Reconnects, r.SettleErrors, _ = cs.sdkTotals()
		if progs != nil {
			r.Reconnects, r.SettleErrors = progs.totals()
		}
		if sc.Nodes > 1 && len(consumerNodes(cs)) > 1 {
			for i := range cs.byNode {
				r.NodeMessages = append(r.NodeMessages, cs.byNode[i].Load())
			}
		}
		r.DuplicateSamples = cs.dupSeen
	} else {
		r.Lost, r.Duplicates = -1, -1 // not measured: set verify: true
	}
	r.PublishFailed = ps.failed.Load()
	if e := errOf(ps); e != nil {
		errs = append(errs, fmt.Errorf("publish: %w", e))
	}
	lc := ledgerBefore // summed over the nodes (and over the processes of a restarted node)
	for i, n := range nodes {
		if !n.alive() {
			continue
		}
		if c, err := scrapeLedgerCounters(n.adminAddr); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i+1, err))
		} else {
			lc.add(c)
		}
	}
	r.DedupeHits, r.LedgerErrors, r.Undeduped = lc.DedupeHits, lc.LedgerErrors, lc.Undeduped
	errs = append(errs, stopAll(nodes, 15*time.Second)...)
	if rds != nil {
		if err := rds.stop(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	smp.close()
	peak, hwm := smp.peakKiB()
	if measuredPeak >= 0 {
		peak = measuredPeak
	}
	r.SidecarRSSMBPeak, r.SidecarHWMMB, r.SidecarRSSMBEnd = float64(peak)/1024, float64(hwm)/1024, float64(end.rssKiB)/1024

	dur := end.t.Sub(start.t).Seconds()
	r.DurationS = round(dur, 3)
	if dur > 0 && end.sidecar > 0 {
		r.SidecarCPUCores = round(float64(end.sidecar-start.sidecar)/clockTicks/dur, 3)
		if sc.Nodes > 1 {
			for i := range end.nodes {
				r.NodeCPUCores = append(r.NodeCPUCores, round(float64(end.nodes[i]-start.nodes[i])/clockTicks/dur, 3))
			}
		}
	}
	if dur > 0 && r.Messages > 0 {
		r.MsgsPerS = round(float64(r.Messages)/dur, 0)
		r.MBPerS = round(float64(r.Messages)*float64(sc.MessageBytes)/dur/mib, 1)
		r.SidecarCPUUsPerMsg = round(float64(end.sidecar-start.sidecar)*1e6/clockTicks/float64(r.Messages), 2)
		r.LoadtestCPUUsPerMsg = round(float64(end.harness-start.harness)*1e6/clockTicks/float64(r.Messages), 2)
		if progs != nil {
			r.ConsumerCPUUsPerMsg = round(float64(end.consumer-start.consumer)*1e6/clockTicks/float64(r.Messages), 2)
			r.ConsumerCPUCores = round(float64(end.consumer-start.consumer)/clockTicks/dur, 3)
			r.ConsumerHWMMB = round(float64(consumerHWMKiB)/1024, 1)
		}
		if brk != nil {
			r.Backend = sc.Backend
			r.BrokerCPUUsPerMsg = round(float64(end.broker-start.broker)*1e6/clockTicks/float64(r.Messages), 2)
		}
		if rds != nil {
			r.RedisCPUUsPerMsg = round(float64(end.redis-start.redis)*1e6/clockTicks/float64(r.Messages), 2)
			r.RedisCPUCores = round(float64(end.redis-start.redis)/clockTicks/dur, 2)
			r.RedisScriptsPerMsg = round(float64(end.redisCalls-start.redisCalls)/float64(r.Messages), 4)
			r.RedisScriptUsPerMsg = round(float64(end.redisUsec-start.redisUsec)/float64(r.Messages), 2)
			r.RedisCommandsPerMsg = round(float64(end.redisInner-start.redisInner)/float64(r.Messages), 2)
		}
	}
	r.P50Ms, r.P99Ms = round(lat.quantileMs(0.50), 3), round(lat.quantileMs(0.99), 3)
	r.P999Ms, r.MaxMs = round(lat.quantileMs(0.999), 3), round(lat.maxMs(), 3)
	if sc.Mode == "failover" { // exact, over the rounds
		r.P50Ms, r.P99Ms = round(quantile(r.FailoverMs, 0.50), 3), round(quantile(r.FailoverMs, 0.99), 3)
		r.P999Ms, r.MaxMs = round(quantile(r.FailoverMs, 0.999), 3), round(quantile(r.FailoverMs, 1), 3)
	}
	r.SidecarRSSMBIdle, r.SidecarRSSMBPeak, r.SidecarHWMMB = round(r.SidecarRSSMBIdle, 1), round(r.SidecarRSSMBPeak, 1), round(r.SidecarHWMMB, 1)
	r.SidecarRSSMBEnd = round(r.SidecarRSSMBEnd, 1)
	for _, e := range errs {
		r.Errors = append(r.Errors, e.Error())
	}
	return r, nil
}

// markEnd closes a consume phase at t1 (when the last new message was
// handled), reading CPU now (at most one poll later).
func markEnd(pp procs, t1 time.Time, waitErr error, errs *[]error) (phase, error) {
	if waitErr != nil {
		*errs = append(*errs, waitErr)
	}
	m, err := mark(pp)
	if err != nil {
		return m, err
	}
	if !t1.IsZero() {
		m.t = t1
	}
	return m, nil
}

// waitCovered waits until the producers are done and every acknowledged
// message was handled, or within passes. It returns when the last new
// message was handled.
func waitCovered(ctx context.Context, ps *pubStats, cs *consStats, within time.Duration) (time.Time, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := func() time.Time {
		if ns := cs.lastNewNs.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
		return time.Time{}
	}
	for {
		select {
		case <-ps.done:
			if cs.distinct.Load() >= ps.ackedN.Load() && cs.seen.missing(ps.acked) == 0 {
				return last(), nil
			}
		default:
		}
		select {
		case <-ctx.Done():
			return last(), ctx.Err()
		case <-deadline.C:
			return last(), fmt.Errorf("%w within %s: %d of %d", errNotCovered, within, cs.distinct.Load(), ps.ackedN.Load())
		case <-tick.C:
		}
	}
}

// errNotCovered: the run's deadline came before every acknowledged
// message was handled.
var errNotCovered = errors.New("not every acknowledged message was handled")

// quantile is the nearest-rank q-quantile of xs (0 for none).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func errOf(ps *pubStats) error {
	if e := ps.firstErr.Load(); e != nil {
		return *e
	}
	return nil
}

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

var errFailed = errors.New("loadtest: the run lost or duplicated messages or hit errors")
