// The fault suite over real spoold processes (issue: verification). Each
// run starts a 3-node cluster, each spoold in its own network namespace
// (chaos/netns), a redis-server for the ledger on the bridge, and a
// workload through the Go SDK: one producer per sidecar publishing unique
// values with keys, one app per sidecar consuming them in one group. A
// seeded schedule injects one kind of fault; then every fault heals, the
// apps catch up, each node's copy of the log is read, and chaos/check
// judges the history. A run is replayed from its seed.
//
//	make chaos                                  # SPOOL_CHAOS_RUNS runs per fault (default 50)
//	SPOOL_CHAOS_SEED=42 SPOOL_CHAOS_FAULTS=isolate go test ./chaos/ -run TestChaos -v
//
// Environment: SPOOL_CHAOS_RUNS (runs per fault, default 1), SPOOL_CHAOS_FAULTS
// (comma-separated of kill, pause, isolate, oneway, redis, majority, diskfull, corrupt, powerloss, clock, flaky, bridge, slowdisk; default kill: the short form
// that `make test` runs), SPOOL_CHAOS_SEED (the first run's seed; default
// from the clock, printed), SPOOL_CHAOS_SECONDS (faulted time per run,
// default 10), SPOOL_CHAOS_OUT (where histories, logs and report.md go;
// default a temporary directory, printed, kept when a run fails),
// SPOOL_CHAOS_STORAGE_SYNC (every node's storage.sync: files, filesystem
// or journal; default spoold's).
// Without root and iproute2 the suite says why and skips: it creates
// network namespaces; without nftables it skips the oneway, flaky and
// bridge runs, saying so; without the kernel's sch_netem the flaky runs
// lose packets but delay none, and the report says "skipped delay".
package chaos

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/chaos/check"
	"github.com/spoolmq/spool/chaos/netns"
	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/internal/wallclock"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// The cluster of a run.
const (
	nodes      = 3 // spoolds of a run (membership: one more), and the topic's replication factor
	partitions = 4
	keys       = 8
	appPort    = 7101
	peerPort   = 7102
	adminPort  = 7103
	redisPort  = 7104
	group      = "verify"
	topic      = "orders"
)

var spooldBin string

func TestMain(m *testing.M) {
	code := func() int {
		if netns.Available() != nil {
			return m.Run() // the tests skip, saying why
		}
		dir, err := os.MkdirTemp("", "spool-chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		spooldBin = filepath.Join(dir, "spoold")
		// A test build: the powerloss kind needs its fault mode (off
		// unless a run sets log.PowerLossEnv).
		cmd := exec.Command("go", "build", "-tags", "spoolfaults", "-o", spooldBin, "github.com/spoolmq/spool/cmd/spoold")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building spoold:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// faultKind is one kind of fault a run injects (one kind per run).
type faultKind struct {
	// needs says why the kind cannot run on this machine (nil: it can).
	needs func() error
	// pick chooses the node to fault (nil: the node drawn from the seed).
	pick func(r *run, drawn int) int
	// holdMs is the range of a fault's length, drawn from the seed.
	holdMs [2]int
	// network: it cuts links; after its heal every sidecar must publish to
	// every partition within check.HealPublishBound.
	network bool
	// ledger: it faults the ledger, not a node (check.Fault.Ledger).
	ledger bool
	// quorum: it faults node i and the next one at once.
	quorum bool
	// degraded: the node runs on, degraded (check.Fault.Degraded).
	degraded bool
	// powerLoss: every spoold journals its syncs (log.PowerLossEnv).
	powerLoss bool
	// clocks: every spoold's clock takes its offset from a file
	// (wallclock.OffsetEnv).
	clocks bool
	// extraNode: the run has a fourth spoold (nodes+1; the topic keeps
	// nodes replicas per partition), so that replicas can move.
	extraNode bool
	// disks: each node's data dir is on a file system of its own (a
	// tmpfs of diskSize), so one can be filled.
	disks bool
	// slowSyncs: every spoold's syncs wait the delay in a file
	// (log.SlowSyncEnv).
	slowSyncs bool
	// previous: every node starts on the previous release's spoold
	// (RELEASES; upgrade_test.go), which inject replaces.
	previous bool
	// graceful: a fault is an operator's restart (SIGTERM, the drain),
	// which allows no message completed twice (check.Fault.Graceful).
	graceful bool
	// inject faults node i for hold (or until the run's faulted time ends)
	// and heals it.
	inject func(r *run, i int, hold time.Duration) error
}

var faults = map[string]faultKind{
	// kill: kill -9 a node's spoold, restart it after hold.
	"kill": {holdMs: [2]int{3000, 8000}, inject: func(r *run, i int, hold time.Duration) error {
		r.kill(i)
		if !r.sleep(hold) {
			return nil
		}
		return r.start(i)
	}},
	// pause: SIGSTOP a node's spoold past the election timeout, then SIGCONT.
	"pause": {holdMs: [2]int{3000, 8000}, inject: func(r *run, i int, hold time.Duration) error {
		_ = r.procs[i].cmd.Process.Signal(syscall.SIGSTOP)
		r.sleep(hold)
		return r.procs[i].cmd.Process.Signal(syscall.SIGCONT)
	}},
	// isolate: cut a node off from its peers, Redis and its clients at once.
	"isolate": {holdMs: [2]int{3000, 8000}, network: true, inject: func(r *run, i int, hold time.Duration) error {
		if err := r.net.Isolate(i); err != nil {
			return err
		}
		r.sleep(hold)
		return r.net.Heal(i)
	}},
	// majority: kill -9 two of the three nodes at once (a majority of every
	// partition's replicas), restart both after hold. While both are down
	// nothing may be acknowledged (check.Fault.QuorumLost).
	"majority": {holdMs: [2]int{3000, 8000}, quorum: true, inject: func(r *run, i int, hold time.Duration) error {
		r.kill(i)
		r.kill((i + 1) % nodes)
		r.mu.Lock()
		r.quorumLost = time.Now()
		r.mu.Unlock()
		if !r.sleep(hold) {
			return nil
		}
		return errors.Join(r.start(i), r.start((i+1)%nodes))
	}},
	// diskfull: fill the file system of a node's data dir (a tmpfs of its
	// own, mounted for the run) until writes fail with ENOSPC, free it after
	// hold. While it is full, every sidecar, that node's own included, must
	// publish to every partition within check.HealPublishBound of the fill
	// (check.Fault.Degraded), and once space returns the node's replicas
	// catch up without a restart (the run's end checks every copy).
	"diskfull": {disks: true, holdMs: [2]int{3000, 8000}, degraded: true, inject: func(r *run, i int, hold time.Duration) error {
		filler := filepath.Join(r.disk(i), "filler")
		if err := fill(filler); err != nil {
			return err
		}
		r.sleep(hold)
		return os.Remove(filler)
	}},
	// corrupt: kill -9 a node, damage one of its copies of the topic while
	// it is down — flip a byte, or cut the segment's tail (synced data
	// gone, as a disk that lied about a flush) — and restart it after hold.
	// A minority is damaged: nothing acknowledged may be lost, and by the
	// run's end the damaged copy is repaired (every copy compared).
	"corrupt": {holdMs: [2]int{1000, 3000}, inject: func(r *run, i int, hold time.Duration) error {
		// Only a minority is ever damaged: the previous damage must be
		// repaired first (every partition back on all three nodes, no move
		// under way). Two of three copies damaged at once leave the
		// partition's group without a quorum to replace them: it waits for
		// an operator (docs/operations.md).
		if err := r.awaitRepaired(30 * time.Second); err != nil {
			r.record(op{Kind: "skip", Node: i, Err: "no damage: the previous one is not repaired yet: " + err.Error()})
			return nil
		}
		r.kill(i)
		if err := r.damage(i); err != nil {
			return err
		}
		if !r.sleep(hold) {
			return nil
		}
		return r.start(i)
	}},
	// powerloss: the power of a node goes (every second fault: of every
	// node at once): kill -9, every file cut back to what was synced
	// (log.PowerLossFS's journal, log.CutToSynced), restart after hold.
	// Nothing acknowledged may be lost: a publish is acknowledged once a
	// quorum synced it.
	"powerloss": {holdMs: [2]int{1000, 3000}, powerLoss: true, inject: func(r *run, i int, hold time.Duration) error {
		victims := []int{i}
		if r.powerLosses++; r.powerLosses%2 == 0 { // every second one: the whole cluster
			victims = []int{0, 1, 2}
			r.mu.Lock()
			r.alsoFaulted = []int{(i + 1) % nodes, (i + 2) % nodes}
			r.mu.Unlock()
		}
		for _, v := range victims {
			r.kill(v)
		}
		for _, v := range victims {
			cut, err := log.CutToSynced(r.journal(v))
			if err != nil {
				return err
			}
			r.record(op{Kind: "damage", Node: v, Offset: cut, Err: fmt.Sprintf("power loss: %d bytes not synced cut", cut)})
		}
		if !r.sleep(hold) {
			return nil
		}
		var errs []error
		for _, v := range victims {
			errs = append(errs, r.start(v))
		}
		return errors.Join(errs...)
	}},
	// clock: a node's wall clock as others see it (internal/wallclock: its
	// ledger leases and now, publish times when it leads, coordinator
	// command times) jumps 30 s ahead or behind (drawn from the seed) for
	// hold, then back. Leases, publish times and sessions must stay safe:
	// nothing lost, publish order kept, no message completed twice.
	"clock": {clocks: true, holdMs: [2]int{5000, 10000}, inject: func(r *run, i int, hold time.Duration) error {
		off := 30000
		if r.rng.IntN(2) == 0 {
			off = -off
		}
		r.record(op{Kind: "damage", Node: i, Offset: int64(off), Err: fmt.Sprintf("clock %+d ms", off)})
		if err := os.WriteFile(r.clockFile(i), []byte(strconv.Itoa(off)), 0o644); err != nil {
			return err
		}
		r.sleep(hold)
		return os.WriteFile(r.clockFile(i), []byte("0"), 0o644)
	}},
	// redis: kill -9 the ledger's redis-server, restart it after hold on its
	// append-only file (appendfsync always: what it acknowledged survives).
	// Deliveries pause meanwhile (redis_unavailable: pause, the default);
	// nothing may be lost, and a message may be completed twice only if its
	// first completion could not reach the ledger (during the outage or just
	// before it).
	"redis": {pick: func(*run, int) int { return -1 }, holdMs: [2]int{2000, 6000}, ledger: true,
		inject: func(r *run, _ int, hold time.Duration) error {
			_ = r.redis.Process.Kill()
			_ = r.redis.Wait()
			r.sleep(hold)
			return r.startRedis()
		}},
	// oneway: the node leading the most partitions stops hearing its peers
	// (it still sends to them, and hears Redis and its clients) for 10-20 s.
	"oneway": {needs: netns.OneWayAvailable, pick: (*run).mostLeading, holdMs: [2]int{10000, 20000}, network: true,
		inject: func(r *run, i int, hold time.Duration) error {
			var peers []int
			for j := range nodes {
				if j != i {
					peers = append(peers, j)
				}
			}
			if err := r.net.CutFrom(i, peers); err != nil {
				return err
			}
			r.sleep(hold)
			return r.net.Uncut(i)
		}},
}

func init() {
	// flaky: one node's link loses 5-30% of its packets each way (drawn
	// from the seed; nftables) and, where the kernel has sch_netem, delays
	// what it sends by 20-100 ms ± a quarter; Redis and its clients are on
	// that link too. After the heal every sidecar publishes to every
	// partition within check.HealPublishBound.
	faults["flaky"] = faultKind{needs: netns.OneWayAvailable, holdMs: [2]int{3000, 8000}, network: true, inject: func(r *run, i int, hold time.Duration) error {
		loss := 5 + r.rng.IntN(26)
		what := fmt.Sprintf("%d%% loss", loss)
		if err := r.net.Flaky(i, loss); err != nil {
			return err
		}
		if r.delays == nil {
			delay := time.Duration(20+r.rng.IntN(81)) * time.Millisecond
			if err := r.net.Delay(i, delay, delay/4); err != nil {
				return err
			}
			what += fmt.Sprintf(", %v ± %v delay", delay, delay/4)
		}
		r.record(op{Kind: "damage", Node: i, Offset: int64(loss), Err: what})
		r.sleep(hold)
		return r.net.Steady(i)
	}}
	// bridge: node i and node i+2 stop hearing each other while node i+1
	// (the bridge) still hears both and both hear it, as do Redis and every
	// client: raft must keep one leader per term and lose nothing. Both cut
	// nodes are recorded as faulted.
	faults["bridge"] = faultKind{needs: netns.OneWayAvailable, holdMs: [2]int{5000, 15000}, network: true, inject: func(r *run, i int, hold time.Duration) error {
		k := (i + 2) % nodes
		r.mu.Lock()
		r.alsoFaulted = []int{k}
		r.mu.Unlock()
		r.record(op{Kind: "damage", Node: i, Err: fmt.Sprintf("bridge: n%d and n%d cut from each other, n%d between", i+1, k+1, (i+1)%nodes+1)})
		if err := errors.Join(r.net.CutFrom(i, []int{k}), r.net.CutFrom(k, []int{i})); err != nil {
			return err
		}
		r.sleep(hold)
		return errors.Join(r.net.Uncut(i), r.net.Uncut(k))
	}}
	// slowdisk: one node's fsyncs (files and directories, log and raft
	// state) each wait 50-500 ms (drawn from the seed) for 5-10 s: a test
	// build's file layer (log.SlowSyncFS). The quorum of the two others
	// acknowledges on; nothing may be lost.
	faults["slowdisk"] = faultKind{slowSyncs: true, holdMs: [2]int{5000, 10000}, inject: func(r *run, i int, hold time.Duration) error {
		ms := 50 + r.rng.IntN(451)
		r.record(op{Kind: "damage", Node: i, Offset: int64(ms), Err: fmt.Sprintf("fsyncs slowed by %d ms", ms)})
		if err := os.WriteFile(r.slowFile(i), []byte(strconv.Itoa(ms)), 0o644); err != nil {
			return err
		}
		r.sleep(hold)
		return os.WriteFile(r.slowFile(i), []byte("0"), 0o644)
	}}
}

func init() {
	// membership: a fourth spoold, so that replicas can move (the topic
	// keeps 3 replicas per partition over 4 nodes), which joins as the
	// first fault begins (its app, producer and probes start then); each
	// fault kill -9s or
	// SIGSTOPs a node (drawn) for hold, and while it is down two changes
	// are made through another node's AdminService.MoveReplicas (what
	// `spool cluster move` calls): each a replica move (one replica swapped
	// for the node holding none) or a leadership transfer (the same
	// replicas, another first: the preferred leader), drawn from the seed.
	// In one fault in two after the fourth node joined, the first change
	// is a leave instead: another node is decommissioned through a third
	// (AdminService.DecommissionNode); once node i is back it must be
	// removed within DecommissionBound, and is then wiped and started
	// again as a new node (rejoin).
	faults["membership"] = faultKind{extraNode: true, holdMs: [2]int{3000, 8000}, pick: func(r *run, drawn int) int {
		if r.procs[drawn] == nil {
			return drawn % nodes // not joined yet: fault one that runs
		}
		return drawn
	}, inject: func(r *run, i int, hold time.Duration) error {
		joining := r.procs[nodes] == nil
		if joining { // the fourth node joins now, as node i goes down
			if err := r.start(nodes); err != nil {
				return err
			}
			r.startWork(nodes)
			r.record(op{Kind: "join", Node: nodes, Err: fmt.Sprintf("n%d joins while n%d goes down", nodes+1, i+1)})
		}
		pause := r.rng.IntN(2) == 0
		if pause {
			_ = r.procs[i].cmd.Process.Signal(syscall.SIGSTOP)
		} else {
			r.kill(i)
		}
		// A leave (one fault in two, once the fourth node is a member):
		// another node is decommissioned through a third while node i is
		// down.
		leaver, leaveFrom := -1, time.Now()
		if r.rng.IntN(2) == 0 && !joining {
			leaver = r.leave(i)
		} else {
			r.moveOne(i)
		}
		ok := r.sleep(hold / 2)
		if ok {
			r.moveOne(i)
			ok = r.sleep(hold - hold/2)
		}
		var err error
		switch {
		case pause:
			err = r.procs[i].cmd.Process.Signal(syscall.SIGCONT)
		case !ok && leaver < 0:
			return nil // the run's end restarts it
		default:
			err = r.start(i)
		}
		if err != nil || leaver < 0 {
			return err
		}
		return r.rejoin(leaver, leaveFrom)
	}}
}

// DecommissionBound is how long a decommission may take once the faults
// around it heal (docs/operations.md, "Taking a node out for good"): its
// replicas' moves, then its removal.
const DecommissionBound = 30 * time.Second

// leave decommissions a node other than down through a third node's
// AdminService.DecommissionNode (what `spool cluster decommission` calls),
// both drawn from the run's seed, and returns the node's index, or -1 when
// the decommission was not accepted (recorded as a refusal, as a move's
// is).
func (r *run) leave(down int) int {
	j := (down + 1 + r.rng.IntN(r.n-1)) % r.n
	var others []int
	for k := range r.n {
		if k != down && k != j {
			others = append(others, k)
		}
	}
	via := others[r.rng.IntN(len(others))]
	st, err := r.status(j)
	if err == nil {
		err = r.decommission(via, st.GetNodeId())
	}
	r.record(op{Kind: "move", Node: via, Err: fmt.Sprintf("leave of n%d (id %s) through n%d while n%d is down: %v", j+1, st.GetNodeId(), via+1, down+1, cmp.Or[error](err, errors.New("accepted")))})
	if err != nil {
		return -1
	}
	return j
}

// decommission asks node via to decommission the node with id.
func (r *run) decommission(via int, id string) error {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(via), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = spoolv1.NewAdminServiceClient(conn).DecommissionNode(ctx, &spoolv1.DecommissionNodeRequest{NodeId: id})
	return err
}

// rejoin waits until node j, decommissioned, is removed (DecommissionBound,
// from now: the fault around it healed), then stops it (SIGTERM), wipes its
// data dir and starts it again: it joins as a new node, through any other.
// From from to its readiness it is a graceful fault of node j.
func (r *run) rejoin(j int, from time.Time) error {
	id := ""
	if st, err := r.status(j); err == nil {
		id = st.GetNodeId()
	}
	healed := time.Now()
	deadline := healed.Add(DecommissionBound)
	for {
		k := (j + 1) % r.n
		st, err := r.status(k)
		member := err != nil
		for _, nd := range st.GetNodes() {
			member = member || nd.GetId() == id
		}
		if !member {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d (id %s) still a cluster member %v after its decommission and the faults healed (as node %d sees it: %v; its log: n%d.log)", j+1, id, DecommissionBound, k+1, cmp.Or[any](err, st), j+1)
		}
		time.Sleep(200 * time.Millisecond) // sleep-ok: polling the cluster's membership
	}
	r.record(op{Kind: "move", Node: j, Err: fmt.Sprintf("leave of n%d (id %s): removed %v after its decommission, %v after the fault healed; stopped, wiped, started again as a new node", j+1, id, time.Since(from).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))})
	p := r.procs[j]
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node %d did not stop within 30 s of SIGTERM", j+1)
	}
	if err := os.RemoveAll(r.dataDir(j)); err != nil {
		return err
	}
	r.rejoined[j] = true
	if err := r.start(j); err != nil {
		return err
	}
	if err := r.awaitReady(60 * time.Second); err != nil {
		return err
	}
	r.mu.Lock()
	r.flts = append(r.flts, check.Fault{Node: j, From: from, To: time.Now(), Graceful: true})
	r.mu.Unlock()
	return nil
}

// moveOne changes the placement of one partition through the admin API of
// a node other than down: a replica move or a leadership transfer (drawn
// from the run's seed, as are the partition and the node asked). The
// outcome is recorded (kind "move"); a refusal is Spool's answer, not a
// failure of the run.
func (r *run) moveOne(down int) {
	p := int32(r.rng.IntN(partitions))
	transfer := r.rng.IntN(2) == 0
	via := (down + 1 + r.rng.IntN(r.n-1)) % r.n
	pick := r.rng.IntN(nodes)
	what := "replica move"
	if transfer {
		what = "leadership transfer"
	}
	from, all, err := r.placement(down, via, p)
	var to []string
	if err == nil {
		to = slices.Clone(from)
		if transfer {
			to = append(to[1+pick%(len(to)-1):], to[:1+pick%(len(to)-1)]...)
		} else if free := slices.DeleteFunc(all, func(id string) bool { return slices.Contains(from, id) }); len(free) > 0 {
			to[pick%len(to)] = free[0]
		}
		err = r.moveReplicas(via, p, to)
	}
	r.record(op{Kind: "move", Node: via, Partition: p, Err: fmt.Sprintf("%s of %s/%d from %v to %v: %v", what, topic, p, from, to, cmp.Or[error](err, errors.New("accepted")))})
}

// logMoves says how many placement changes (moves, transfers, leaves and
// their ends) the run made and how many were refused.
func (r *run) logMoves() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var made, refused []string
	for _, o := range r.ops {
		switch {
		case o.Kind != "move":
		case strings.HasSuffix(o.Err, ": accepted"), strings.Contains(o.Err, "): removed "):
			made = append(made, o.Err)
		default:
			refused = append(refused, o.Err)
		}
	}
	r.t.Logf("%d placement changes accepted, %d refused or not made:\n  %s", len(made), len(refused), strings.Join(append(made, refused...), "\n  "))
}

// placement is partition p's replicas (preferred leader first) and the
// ids of every node of the cluster, as node via sees them, or (a node lists
// the replicas of the partitions it holds only) the first other node but
// down that lists them.
func (r *run) placement(down, via int, p int32) (replicas, all []string, err error) {
	for k := range r.n {
		j := (via + k) % r.n
		if j == down {
			continue
		}
		if replicas, all, err = r.placementAt(j, p); err == nil {
			return replicas, all, nil
		}
	}
	return nil, nil, err
}

// placementAt is placement as node j sees it.
func (r *run) placementAt(j int, p int32) (replicas, all []string, err error) {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(j), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	ac := spoolv1.NewAdminServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := ac.ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
	if err != nil {
		return nil, nil, err
	}
	for _, n := range cs.GetNodes() {
		all = append(all, n.GetId())
	}
	lt, err := ac.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		return nil, nil, err
	}
	for _, ti := range lt.GetTopics() {
		for _, pi := range ti.GetPartitions() {
			if ti.GetName() == topic && pi.GetPartition() == p {
				replicas = pi.GetReplicas()
			}
		}
	}
	if len(replicas) < 2 {
		return nil, nil, fmt.Errorf("node %d holds no replica of %s/%d: it does not list the replicas", j+1, topic, p)
	}
	return replicas, all, nil
}

// moveReplicas asks node via to move partition p's replicas to to.
func (r *run) moveReplicas(via int, p int32, to []string) error {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(via), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = spoolv1.NewAdminServiceClient(conn).MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: topic, Partition: p, Replicas: to})
	return err
}

// TestChaos runs SPOOL_CHAOS_RUNS seeded runs of each fault kind and
// writes the report; any rule broken fails the test, naming the seed.
func TestChaos(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("the fault suite needs network namespaces: %v", err)
	}
	runs := envInt("SPOOL_CHAOS_RUNS", 1)
	secs := envInt("SPOOL_CHAOS_SECONDS", 10)
	seed := uint64(envInt("SPOOL_CHAOS_SEED", int(time.Now().UnixNano()%1e9)))
	kinds := strings.Split(cmp.Or(os.Getenv("SPOOL_CHAOS_FAULTS"), "kill"), ",")
	out := os.Getenv("SPOOL_CHAOS_OUT")
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "spool-chaos-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(out)
			}
		})
	}
	t.Logf("fault runs: %d per kind of %v, %d s each, first seed %d; histories and logs in %s", runs, kinds, secs, seed, out)
	var rep report
	ran := 0
	for _, kind := range kinds {
		fk, ok := faults[kind]
		if !ok {
			t.Fatalf("unknown fault %q (known: %s)", kind, strings.Join(slices.Sorted(maps.Keys(faults)), ", "))
		}
		if fk.needs != nil {
			if err := fk.needs(); err != nil {
				t.Logf("skipping the %s runs: %v", kind, err)
				continue
			}
		}
		ran++
		if kind == "flaky" {
			if err := netns.DelayAvailable(); err != nil {
				rep.note("flaky: skipped delay: %v", err)
				t.Logf("flaky: skipped delay: %v", err)
			}
		}
		for k := range runs {
			s := seed + uint64(k)
			dir := filepath.Join(out, fmt.Sprintf("%s-%d", kind, s))
			res, err := oneRun(t, kind, s, time.Duration(secs)*time.Second, dir, nil)
			rep.add(kind, s, res, err)
			switch {
			case err != nil:
				t.Errorf("%s seed %d: the run failed: %v (replay: SPOOL_CHAOS_FAULTS=%s SPOOL_CHAOS_SEED=%d; in %s)", kind, s, err, kind, s, dir)
			case !res.OK():
				t.Errorf("%s seed %d broke a rule (replay: SPOOL_CHAOS_FAULTS=%s SPOOL_CHAOS_SEED=%d; history in %s):\n%s", kind, s, kind, s, dir, strings.Join(res.Violations, "\n"))
			default:
				t.Logf("%s seed %d: %d acknowledged, %d duplicated (unknown outcomes), longest publish gap %v, longest from a heal to a producer's next acknowledgement %v, to a sidecar's first on a partition %v (%d not judged: the next fault came first); longest from an acknowledgement to the first completion %v (%s); %d readings of offsets judged (%d lower after a restart of their sidecar: %v), longest partition pause after a fault %v", kind, s, res.Acked, res.Duplicated, res.LongestPublishGap.Round(time.Millisecond), res.LongestRecovery.Round(time.Millisecond), res.LongestHealPublish.Round(time.Millisecond), res.UnjudgedHeals, res.LongestToCompletion.Round(time.Millisecond), res.LongestToCompletionValue, res.Observed, res.BackAfterRestart, res.BackAfterRestartExamples, res.LongestPartitionPause.Round(time.Millisecond))
			}
		}
	}
	if ran == 0 {
		t.Skip("no fault kind asked for can run here")
	}
	md := rep.markdown()
	if err := os.WriteFile(filepath.Join(out, "report.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("report (%s):\n%s", filepath.Join(out, "report.md"), md)
}

// proc is one node's spoold.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// run is one fault run.
type run struct {
	t     *testing.T
	dir   string
	net   *netns.Net
	redis *exec.Cmd
	n     int // spoolds: nodes, or nodes+1 (faultKind.extraNode)
	procs []*proc
	bins  []string // each node's spoold: spooldBin, or the previous release's
	// rolled: the nodes an upgrade run has replaced (upgrade_test.go).
	rolled []bool
	// rejoined: the nodes a leave removed and started again on a wiped
	// data dir (they join through any other node).
	rejoined []bool
	starts   []int // how many times each spoold was started (under mu)
	wl       *workload
	stop     chan struct{} // closed when the faulted time ends

	mu    sync.Mutex
	pubs  []check.Publish
	comps []check.Completion
	offs  []check.OffsetsSeen   // what the observer read of offsets
	coms  []check.CommittedSeen // and of the group's committed offsets
	flts  []check.Fault
	ops   []op // the history, as recorded
	// quorumLost: when the last kill of a majority fault was done.
	quorumLost  time.Time
	mounts      []string   // each node's tmpfs (diskfull runs)
	rng         *rand.Rand // what a fault damages (drawn from the seed; the faults' goroutine only)
	powerLoss   bool       // the spoolds journal their syncs (the powerloss kind)
	powerLosses int        // how many so far
	clocks      bool       // the spoolds' clocks take offsets (the clock kind)
	slowSyncs   bool       // the spoolds' syncs take delays (the slowdisk kind)
	// delays says why links cannot be delayed here (nil: they can; the
	// flaky kind delays where it can, loses packets everywhere).
	delays error
	// alsoFaulted: the other nodes the fault under way hit (recorded with
	// it when it heals).
	alsoFaulted []int
}

// op is one line of the history (history.jsonl).
type op struct {
	At        time.Time `json:"at"`
	Kind      string    `json:"kind"` // invoke, ok, fail, unknown, complete, fault, heal, damage, skip, move, join
	Node      int       `json:"node"`
	Value     string    `json:"value,omitempty"`
	Partition int32     `json:"partition,omitempty"`
	Offset    int64     `json:"offset,omitempty"`
	Token     uint64    `json:"token,omitempty"`
	Err       string    `json:"err,omitempty"`
}

func (r *run) record(o op) {
	o.At = time.Now()
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// sleep waits d or until the faulted time ends (false then).
func (r *run) sleep(d time.Duration) bool {
	select {
	case <-time.After(d): // the fault's length, drawn from the seed: not a wait for a condition
		return true
	case <-r.stop:
		return false
	}
}

// fixedFault replaces a run's seeded schedule by one fault: After the
// workload starts, held for Hold.
type fixedFault struct{ After, Hold time.Duration }

// oneRun runs one fault run of kind: the faults on a schedule drawn from
// seed, or the one fault fixed says (nil: the seeded schedule).
func oneRun(t *testing.T, kind string, seed uint64, length time.Duration, dir string, fixed *fixedFault) (check.Result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return check.Result{}, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x5b001))
	count := nodes
	if faults[kind].extraNode {
		count++
	}
	n, err := netns.New("c"+strconv.Itoa(int(seed%1000)), 100+int(seed%100), count)
	if err != nil {
		return check.Result{}, err
	}
	r := &run{t: t, dir: dir, net: n, n: count, procs: make([]*proc, count), bins: make([]string, count), rolled: make([]bool, count), rejoined: make([]bool, count), starts: make([]int, count), stop: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 0xda4a6e))}
	defer r.close()
	r.powerLoss, r.clocks, r.slowSyncs = faults[kind].powerLoss, faults[kind].clocks, faults[kind].slowSyncs
	if kind == "flaky" {
		r.delays = netns.DelayAvailable()
	}
	for i := range count {
		r.bins[i] = spooldBin
		if faults[kind].previous {
			if r.bins[i], err = previousSpoold(); err != nil {
				return check.Result{}, err
			}
		}
	}
	if faults[kind].disks {
		if err := r.mountDisks(); err != nil {
			return check.Result{}, err
		}
	}
	if err := r.startRedis(); err != nil {
		return check.Result{}, err
	}
	// The extra node (membership) joins during the first fault.
	for i := range nodes {
		if err := r.start(i); err != nil {
			return check.Result{}, err
		}
	}
	if err := r.awaitReady(60 * time.Second); err != nil {
		return check.Result{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubCtx, pubStop := context.WithCancel(ctx)
	probeCtx, probeStop := context.WithCancel(ctx)
	wl := &workload{ctx: ctx, pubCtx: pubCtx, probeCtx: probeCtx}
	work, probing := &wl.work, &wl.probing
	r.wl = wl
	for i := range nodes {
		r.startWork(i)
	}
	// The observer: through each sidecar, the partitions' offsets and the
	// group's committed offsets, as a client reads them.
	probing.Go(func() { r.observe(probeCtx) })
	// The faults: one node at a time, 2-5 s apart, each held as its kind says.
	fk := faults[kind]
	faultsDone := make(chan error, 1)
	go func() {
		var errs []error
		wait := func() time.Duration { return time.Duration(2000+rng.IntN(3000)) * time.Millisecond }
		if fixed != nil {
			done := false
			wait = func() time.Duration {
				if done {
					return length + time.Hour // no more faults: sleep until the run ends
				}
				done = true
				return fixed.After
			}
		}
		for r.sleep(wait()) {
			i := rng.IntN(r.n)
			hold := time.Duration(fk.holdMs[0]+rng.IntN(fk.holdMs[1]-fk.holdMs[0])) * time.Millisecond
			if fixed != nil {
				hold = fixed.Hold
			}
			if fk.pick != nil {
				i = fk.pick(r, i)
			}
			r.record(op{Kind: "fault", Node: i, Err: kind + " for " + hold.String()})
			from := time.Now()
			errs = append(errs, fk.inject(r, i, hold))
			r.mu.Lock()
			f := check.Fault{Node: i, From: from, To: time.Now(), Network: fk.network, Ledger: fk.ledger, Degraded: fk.degraded, Graceful: fk.graceful}
			r.flts = append(r.flts, f)
			if fk.quorum {
				f.Node, f.QuorumLost = (i+1)%nodes, r.quorumLost
				r.flts = append(r.flts, f)
			}
			for _, j := range r.alsoFaulted {
				f.Node = j
				r.flts = append(r.flts, f)
			}
			r.alsoFaulted = nil
			r.mu.Unlock()
			r.record(op{Kind: "heal", Node: i})
		}
		faultsDone <- errors.Join(errs...)
	}()
	time.Sleep(length) // sleep-ok: the faulted time of the run
	close(r.stop)
	ferr := <-faultsDone
	// Heal everything: links up, processes running.
	ferr = errors.Join(ferr, r.net.HealAll())
	for i, p := range r.procs {
		if p == nil { // an extra node no fault came to join
			ferr = errors.Join(ferr, r.start(i))
			r.startWork(i)
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-p.exited:
			ferr = errors.Join(ferr, r.start(i))
		default:
		}
	}
	healed := time.Now()
	pubStop()
	work.Wait()
	if ferr != nil {
		probeStop()
		probing.Wait()
		return check.Result{}, ferr
	}
	if err := r.awaitReady(60 * time.Second); err != nil {
		probeStop()
		probing.Wait()
		return check.Result{}, err
	}
	// The last heal is judged too: probe until every sidecar published to
	// every partition after it (the checker judges how soon), or 30 s.
	r.awaitProbed(healed, 30*time.Second)
	probeStop()
	probing.Wait()
	logs, err := r.awaitCaughtUp(ctx, 90*time.Second)
	r.mu.Lock()
	consumers := wl.consumers
	r.mu.Unlock()
	for _, c := range consumers {
		c()
	}
	if err != nil {
		return check.Result{}, err
	}
	r.mu.Lock()
	h := check.History{Publishes: r.pubs, Logs: logs, Completions: r.comps, Faults: r.flts, Sidecars: r.n, Partitions: partitions,
		Offsets: r.offs, Committed: r.coms}
	r.mu.Unlock()
	res := check.Check(h)
	if faults[kind].extraNode {
		r.logMoves()
	}
	return res, r.writeHistory(res)
}

// workload is what runs through the sidecars: each one's producer, app
// and probes (startWork), stopped by the run's end.
type workload struct {
	ctx, pubCtx, probeCtx context.Context
	work, probing         sync.WaitGroup
	consumers             []func() // under run.mu
}

// startWork starts node i's producer, app and probes (once node i runs).
func (r *run) startWork(i int) {
	wl := r.wl
	wl.work.Go(func() { r.produce(wl.pubCtx, i) })
	cctx, ccancel := context.WithCancel(wl.ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.consume(cctx, i) }()
	r.mu.Lock()
	wl.consumers = append(wl.consumers, func() { ccancel(); <-done })
	r.mu.Unlock()
	for p := range int32(partitions) {
		wl.probing.Go(func() { r.probe(wl.probeCtx, i, p) })
	}
}

func (r *run) close() {
	for i := range r.procs {
		if r.procs[i] != nil {
			r.kill(i)
		}
	}
	if r.redis != nil {
		_ = r.redis.Process.Kill()
		_ = r.redis.Wait()
	}
	if err := r.net.Close(); err != nil {
		r.t.Logf("removing the run's namespaces: %v", err)
	}
	for _, m := range r.mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			r.t.Logf("unmounting %s: %v", m, err)
		}
	}
}

// damage flips a byte of, or cuts the tail off, the newest segment of one
// of node i's copies of the topic's partitions, in its second half (drawn
// from the run's seed), and records what it did in the history.
func (r *run) damage(i int) error {
	p := r.rng.IntN(partitions)
	dir := filepath.Join(r.dataDir(i), "log", fmt.Sprintf("%s-%d", topic, p))
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(segs) == 0 {
		return fmt.Errorf("node %d holds no segment of %s-%d: %v", i+1, topic, p, err)
	}
	slices.Sort(segs)
	seg := segs[len(segs)-1]
	st, err := os.Stat(seg)
	if err != nil {
		return err
	}
	if st.Size() < 2 {
		return nil // nothing written yet
	}
	at := st.Size()/2 + r.rng.Int64N(st.Size()-st.Size()/2)
	if r.rng.IntN(2) == 0 {
		r.record(op{Kind: "damage", Node: i, Partition: int32(p), Offset: at, Err: fmt.Sprintf("cut %s at byte %d of %d", filepath.Base(seg), at, st.Size())})
		return os.Truncate(seg, at)
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= byte(1 + r.rng.IntN(255))
	r.record(op{Kind: "damage", Node: i, Partition: int32(p), Offset: at, Err: fmt.Sprintf("flipped byte %d of %d in %s", at, st.Size(), filepath.Base(seg))})
	_, err = f.WriteAt(b, at)
	return err
}

// clockFile is node i's clock offset in milliseconds (wallclock.OffsetEnv).
func (r *run) clockFile(i int) string { return filepath.Join(r.dir, fmt.Sprintf("n%d.clock", i+1)) }

// slowFile is node i's sync delay in milliseconds (log.SlowSyncEnv).
func (r *run) slowFile(i int) string { return filepath.Join(r.dir, fmt.Sprintf("n%d.slowsync", i+1)) }

// journal is node i's power-loss journal (log.PowerLossFS).
func (r *run) journal(i int) string { return filepath.Join(r.dir, fmt.Sprintf("n%d.powerloss", i+1)) }

// diskSize is the size of each node's file system in a diskfull run: far
// more than a run writes, so only the filler fills it.
const diskSize = "256m"

// disk is node i's data dir's file system: the tmpfs of a diskfull run, the
// run's directory otherwise.
func (r *run) disk(i int) string {
	if len(r.mounts) == 0 {
		return r.dir
	}
	return r.mounts[i]
}

// dataDir is node i's data dir.
func (r *run) dataDir(i int) string { return filepath.Join(r.disk(i), fmt.Sprintf("n%d", i+1)) }

// mountDisks gives each node's data dir a tmpfs of its own.
func (r *run) mountDisks() error {
	for i := range nodes {
		m := filepath.Join(r.dir, fmt.Sprintf("disk%d", i+1))
		if err := os.MkdirAll(m, 0o700); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size="+diskSize); err != nil {
			return fmt.Errorf("the diskfull runs need a tmpfs per node: %w", err)
		}
		r.mounts = append(r.mounts, m)
	}
	return nil
}

// fill writes zeros to path until the file system is full (ENOSPC).
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for range 1 << 14 { // at most 16 GiB: bounded whatever the file system
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
	return fmt.Errorf("%s: 16 GiB written and the file system is not full", path)
}

func (r *run) startRedis() error {
	r.redis = exec.Command("redis-server", "--bind", r.net.Host(), "--port", strconv.Itoa(redisPort), "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir, "--protected-mode", "no")
	f, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	r.redis.Stdout, r.redis.Stderr = f, f
	if err := r.redis.Start(); err != nil {
		return err
	}
	return nil
}

// config is node i's spoold.yaml.
func (r *run) config(i int) string {
	join := ""
	switch {
	case i >= nodes: // the extra node joins through any of the first three (one may be down)
		join = fmt.Sprintf("  join: [\"%s:%d\", \"%s:%d\", \"%s:%d\"]\n", r.net.IP(0), peerPort, r.net.IP(1), peerPort, r.net.IP(2), peerPort)
	case r.rejoined[i]: // a decommissioned node, wiped: through any other
		var addrs []string
		for k := range r.n {
			if k != i {
				addrs = append(addrs, fmt.Sprintf("\"%s:%d\"", r.net.IP(k), peerPort))
			}
		}
		join = fmt.Sprintf("  join: [%s]\n", strings.Join(addrs, ", "))
	case i > 0:
		join = fmt.Sprintf("  join: [\"%s:%d\"]\n", r.net.IP(0), peerPort)
	}
	return fmt.Sprintf(`node:
  id: n%d
  data_dir: %s
  app_listen: ["%s:%d"]
  admin_listen: "%s:%d"
  drain_timeout: 5s
`+storageSync()+`# The run's bridge reaches nothing else: plaintext peers, apps, admin and Redis.
apps:
  allow_insecure_tcp: true
admin:
  insecure_no_auth: true
guards:
  insecure_plaintext_remotes: true
cluster:
  insecure: true
  insecure_no_join_secret: true
  listen: "%s:%d"
  produce_timeout: 5s
  group_session_timeout: 3s
%sredis:
  addrs: ["%s:%d"]
topics:
  - name: %s
    partitions: %d
subscriptions:
  - topic: %s
    group: %s
    ordering: key
    visibility_timeout: 5s
`, i+1, r.dataDir(i), r.net.IP(i), appPort, r.net.IP(i), adminPort, r.net.IP(i), peerPort, join, r.net.Host(), redisPort, topic, partitions, topic, group)
}

// storageSync is the storage section that SPOOL_CHAOS_STORAGE_SYNC asks
// for (files, filesystem or journal: storage.sync), or none (the default).
func storageSync() string {
	if v := os.Getenv("SPOOL_CHAOS_STORAGE_SYNC"); v != "" {
		return "storage:\n  sync: " + v + "\n"
	}
	return ""
}

// start starts (or restarts) node i's spoold on its data dir.
func (r *run) start(i int) error {
	cfg := filepath.Join(r.dir, fmt.Sprintf("n%d.yaml", i+1))
	if err := os.WriteFile(cfg, []byte(r.config(i)), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(r.dir, fmt.Sprintf("n%d.log", i+1)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := r.net.Command(i, r.bins[i], "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if r.powerLoss {
		cmd.Env = append(cmd.Env, log.PowerLossEnv+"="+r.journal(i))
	}
	if r.clocks {
		cmd.Env = append(cmd.Env, wallclock.OffsetEnv+"="+r.clockFile(i))
	}
	if r.slowSyncs {
		cmd.Env = append(cmd.Env, log.SlowSyncEnv+"="+r.slowFile(i))
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	r.procs[i] = p
	r.mu.Lock()
	r.starts[i]++
	r.mu.Unlock()
	return nil
}

// kill kill -9s node i's spoold and waits for it to end.
func (r *run) kill(i int) {
	p := r.procs[i]
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// awaitReady waits until every node answers /readyz 200.
func (r *run) awaitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	hc := http.Client{Timeout: time.Second}
	for i := range r.n {
		if r.procs[i] == nil {
			continue // an extra node not joined yet
		}
		for {
			resp, err := hc.Get(fmt.Sprintf("http://%s:%d/readyz", r.net.IP(i), adminPort))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %d not ready after %v (%v)", i+1, d, err)
			}
			time.Sleep(100 * time.Millisecond) // sleep-ok: polling a process's readiness
		}
	}
	return nil
}

// definite are the sidecar's reasons for a publish it certainly did not
// store (docs/errors.md); any other failure's outcome is unknown.
var definite = []string{"NO_LEADER", "UNKNOWN_TOPIC", "INVALID_ARGUMENT", "MESSAGE_TOO_LARGE", "SHUTTING_DOWN", "NOT_READY"}

// produce publishes r-n<i>-<seq> with keys k0..k7 in turn through node i,
// each retried with the same id until acknowledged or the run ends.
func (r *run) produce(ctx context.Context, i int) {
	c, err := r.dial(ctx, i)
	if err != nil {
		return // the run ended first
	}
	defer c.Close()
	for seq := 0; ctx.Err() == nil; seq++ {
		p := check.Publish{Value: fmt.Sprintf("n%d-%d", i+1, seq), Key: fmt.Sprintf("k%d", seq%keys), Producer: i, Seq: seq, Invoked: time.Now()}
		for attempt := 0; ; attempt++ {
			r.record(op{Kind: "invoke", Node: i, Value: p.Value})
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := c.Publish(actx, topic, []byte(p.Key), []byte(p.Value), spool.WithID(p.Value))
			cancel()
			if err == nil {
				p.Acked, p.Partition, p.Offset = true, res.Partition, res.Offset
				r.record(op{Kind: "ok", Node: i, Value: p.Value, Partition: res.Partition, Offset: res.Offset})
				break
			}
			kind := "unknown"
			if slices.Contains(definite, spool.Reason(err)) {
				kind = "fail"
			} else {
				p.Unknown = true
			}
			r.record(op{Kind: kind, Node: i, Value: p.Value, Err: err.Error()})
			if ctx.Err() != nil {
				break
			}
			select {
			case <-time.After(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond): // a producer's retry backoff
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
		p.Done = time.Now()
		r.mu.Lock()
		r.pubs = append(r.pubs, p)
		r.mu.Unlock()
	}
}

// probeEvery is how often each sidecar's probe publishes to each
// partition, and probeTimeout the deadline of each probe.
const (
	probeEvery   = 200 * time.Millisecond
	probeTimeout = 3 * time.Second
)

// probeLink is how fast a probe's own connection to its sidecar recovers
// from a cut of the sidecar's link (isolate cuts it; an app next to its
// sidecar in a pod talks over loopback, which no partition cuts): bytes
// unacknowledged for probeLink close the connection (TCP_USER_TIMEOUT),
// and a connection attempt is bounded by it and retried within 200 ms. So
// the time from a heal to a probe's acknowledgement is the sidecar's, not
// that of a TCP connection in retransmission backoff between the test and
// the namespace.
const probeLink = time.Second

// probeDialOptions are the probes' gRPC dial options (probeLink).
func probeDialOptions() []grpc.DialOption {
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(probeLink.Milliseconds()))
		})
		return cmp.Or(err, serr)
	}}
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: probeLink,
		}),
	}
}

// probe publishes through node i to partition p, one message every
// probeEvery, each once with its own key of p and a deadline of
// probeTimeout, not waiting for the one before: the time from a heal to
// its first acknowledgement does not wait for a publish stuck before it.
func (r *run) probe(ctx context.Context, i int, p int32) {
	c, err := r.dial(ctx, i, spool.WithGRPCDialOptions(probeDialOptions()...))
	if err != nil {
		return
	}
	defer c.Close()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key := probeKey(i, p, n)
		inflight.Go(func() {
			pub := check.Publish{Value: key, Key: key, Producer: -1 - (i*partitions + int(p)), Seq: n, Probe: true, Sidecar: i, Invoked: time.Now()}
			r.record(op{Kind: "invoke", Node: i, Value: key})
			actx, cancel := context.WithTimeout(ctx, probeTimeout)
			res, err := c.Publish(actx, topic, []byte(key), []byte(key), spool.WithID(key))
			cancel()
			pub.Done = time.Now()
			switch {
			case err == nil:
				pub.Acked, pub.Partition, pub.Offset = true, res.Partition, res.Offset
				r.record(op{Kind: "ok", Node: i, Value: key, Partition: res.Partition, Offset: res.Offset})
			case slices.Contains(definite, spool.Reason(err)):
				r.record(op{Kind: "fail", Node: i, Value: key, Err: err.Error()})
			default:
				pub.Unknown = true
				r.record(op{Kind: "unknown", Node: i, Value: key, Err: err.Error()})
			}
			r.mu.Lock()
			r.pubs = append(r.pubs, pub)
			r.mu.Unlock()
		})
	}
}

// probeKey is the n-th probe key of node i for partition p: the first of
// "q<i>-<p>-<n>-<j>", j = 0, 1, ..., that maps to p.
func probeKey(i int, p int32, n int) string {
	for j := 0; ; j++ {
		k := fmt.Sprintf("q%d-%d-%d-%d", i+1, p, n, j)
		if engine.PartitionForKey([]byte(k), partitions) == p {
			return k
		}
	}
}

// awaitProbed waits until every sidecar's probe of every partition
// invoked after since was acknowledged, or d passed.
func (r *run) awaitProbed(since time.Time, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		got := map[[2]int]bool{}
		r.mu.Lock()
		for _, p := range r.pubs {
			if p.Probe && p.Acked && !p.Invoked.Before(since) {
				got[[2]int{p.Sidecar, int(p.Partition)}] = true
			}
		}
		r.mu.Unlock()
		if len(got) == r.n*partitions {
			return
		}
		time.Sleep(100 * time.Millisecond) // sleep-ok: polling the probes' acknowledgements
	}
}

// observeEvery is how often the observer reads each sidecar's offsets and
// the group's committed offsets.
const observeEvery = 250 * time.Millisecond

// observe reads, every observeEvery, through each sidecar, the topic's
// offsets (ListTopics) and the group's committed offsets (ListGroups), as
// a client would, for the rules that they never go back (check.
// OffsetsSeen, check.CommittedSeen). A sidecar that does not answer
// within a second is skipped that round.
func (r *run) observe(ctx context.Context) {
	conns := make([]*grpc.ClientConn, r.n)
	for i := range r.n {
		conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(i), adminPort), append(probeDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			r.t.Errorf("observer: node %d: %v", i+1, err)
			return
		}
		defer conn.Close()
		conns[i] = conn
	}
	tick := time.NewTicker(observeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for i, conn := range conns {
			r.observeOne(ctx, i, spoolv1.NewAdminServiceClient(conn))
		}
	}
}

// observeOne reads sidecar i's offsets and committed offsets once (an
// answer that a restart of the sidecar may have come before is dropped).
func (r *run) observeOne(ctx context.Context, i int, ac spoolv1.AdminServiceClient) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r.mu.Lock()
	run := r.starts[i]
	r.mu.Unlock()
	lt, lterr := ac.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	lg, lgerr := ac.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: group})
	at := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.starts[i] != run {
		return
	}
	if lterr == nil {
		for _, ti := range lt.GetTopics() {
			for _, p := range ti.GetPartitions() {
				if ti.GetName() == topic {
					r.offs = append(r.offs, check.OffsetsSeen{Observer: i, Run: run, Partition: p.GetPartition(), At: at, Start: p.GetStartOffset(), End: p.GetEndOffset()})
				}
			}
		}
	}
	if lgerr == nil {
		for _, gi := range lg.GetGroups() {
			for _, p := range gi.GetPartitions() {
				r.coms = append(r.coms, check.CommittedSeen{Observer: i, Run: run, Group: gi.GetGroup(), Partition: p.GetPartition(), At: at, Offset: p.GetCommittedOffset()})
			}
		}
	}
}

// mostLeading is the node leading the most partitions of the topic, as
// the first node that answers AdminService.ListTopics sees it (drawn, if
// none answers).
func (r *run) mostLeading(drawn int) int {
	for i := range nodes {
		lt, err := r.listTopics(i)
		if err != nil {
			continue
		}
		count := make([]int, nodes)
		for _, ti := range lt.GetTopics() {
			if ti.GetName() != topic {
				continue
			}
			for _, p := range ti.GetPartitions() {
				if n, err := strconv.Atoi(strings.TrimPrefix(p.GetLeader(), "n")); err == nil && n >= 1 && n <= nodes {
					count[n-1]++
				}
			}
		}
		best := drawn
		for j := range nodes {
			if count[j] > count[best] {
				best = j
			}
		}
		return best
	}
	return drawn
}

// awaitRepaired waits until every node holds a replica of every partition
// of the topic, in a group of all three with no move under way: no copy
// is damaged or being replaced.
func (r *run) awaitRepaired(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		why := ""
		for i := range nodes {
			lt, err := r.listTopics(i)
			if err != nil {
				why = fmt.Sprintf("node %d: %v", i+1, err)
				break
			}
			for _, ti := range lt.GetTopics() {
				for _, p := range ti.GetPartitions() {
					if ti.GetName() == topic && (len(p.GetReplicas()) != nodes || len(p.GetTarget()) > 0) {
						why = fmt.Sprintf("node %d: %s/%d has replicas %v, move target %v", i+1, topic, p.GetPartition(), p.GetReplicas(), p.GetTarget())
					}
				}
			}
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not repaired after %v: %s", d, why)
		}
		time.Sleep(200 * time.Millisecond) // sleep-ok: polling the cluster's placement
	}
}

// listTopics asks node i's AdminService for the topics (2 s bound).
func (r *run) listTopics(i int) (*spoolv1.ListTopicsResponse, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(i), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return spoolv1.NewAdminServiceClient(conn).ListTopics(ctx, &spoolv1.ListTopicsRequest{})
}

// dial connects a client to node i's sidecar, as an app does: again and
// again until it answers or ctx ends (a node joining while the node it
// joins through is down may take longer than one Dial waits). Each failed
// try is logged; none fails the run.
func (r *run) dial(ctx context.Context, i int, opts ...spool.DialOption) (*spool.Client, error) {
	for {
		c, err := spool.Dial(ctx, fmt.Sprintf("%s:%d", r.net.IP(i), appPort), opts...)
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		r.t.Logf("dial node %d: %v; dialling again", i+1, err)
	}
}

// consume runs node i's app: it completes every message, recording it.
func (r *run) consume(ctx context.Context, i int) {
	c, err := r.dial(ctx, i)
	if err != nil {
		return
	}
	defer c.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	_ = c.Subscribe(ctx, group, []string{topic}, func(_ context.Context, m *spool.Message) error {
		r.mu.Lock()
		r.comps = append(r.comps, check.Completion{Value: m.ID, Node: i, Partition: m.Partition, Token: m.FencingToken, At: time.Now()})
		r.mu.Unlock()
		r.record(op{Kind: "complete", Node: i, Value: m.ID, Partition: m.Partition, Offset: m.Offset, Token: m.FencingToken})
		return nil
	}, spool.WithConcurrency(4), spool.WithLogger(quiet), spool.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
}

// awaitCaughtUp waits until every node's copy of every partition ends at
// the same offset and the apps completed every acknowledged message, then
// reads each node's copy.
func (r *run) awaitCaughtUp(ctx context.Context, d time.Duration) (map[int][]check.Record, error) {
	deadline := time.Now().Add(d)
	var why error
	for time.Now().Before(deadline) {
		logs := map[int][]check.Record{}
		why = nil
		for i := range r.n {
			recs, err := r.readLog(ctx, i)
			if err != nil {
				why = fmt.Errorf("node %d: %w", i+1, err)
				break
			}
			logs[i] = recs
		}
		if why == nil {
			why = r.caughtUp(logs)
		}
		if why == nil {
			return logs, nil
		}
		time.Sleep(500 * time.Millisecond) // sleep-ok: polling replicas and apps catching up
	}
	return nil, fmt.Errorf("not caught up after %v: %w", d, why)
}

// caughtUp: every copy has the same length per partition and every
// acknowledged value was completed.
func (r *run) caughtUp(logs map[int][]check.Record) error {
	for i := 1; i < r.n; i++ {
		if len(logs[i]) != len(logs[0]) {
			return fmt.Errorf("node %d holds %d records, node 1 %d", i+1, len(logs[i]), len(logs[0]))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	done := map[string]bool{}
	for _, c := range r.comps {
		done[c.Value] = true
	}
	missing := 0
	for _, p := range r.pubs {
		if p.Acked && !done[p.Value] {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d acknowledged messages not completed yet", missing)
	}
	return nil
}

// readLog reads node i's copy of the topic (its admin Tail from the
// earliest offset, up to the ends ListTopics gives).
func (r *run) readLog(ctx context.Context, i int) ([]check.Record, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(i), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ac := spoolv1.NewAdminServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lt, err := ac.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, ti := range lt.GetTopics() {
		if ti.GetName() == topic {
			for _, p := range ti.GetPartitions() {
				ends[p.GetPartition()] = p.GetEndOffset()
			}
		}
	}
	want := 0
	for _, e := range ends {
		want += int(e)
	}
	byPart := map[int32][]check.Record{}
	if want > 0 {
		st, err := ac.Tail(ctx, &spoolv1.TailRequest{Topic: topic, From: &spoolv1.TailRequest_Earliest{Earliest: true}})
		if err != nil {
			return nil, err
		}
		got := 0
		for got < want {
			ev, err := st.Recv()
			if err != nil {
				return nil, fmt.Errorf("tail after %d of %d records: %w", got, want, err)
			}
			rec := ev.GetRecord()
			if rec == nil || rec.GetOffset() >= ends[rec.GetPartition()] {
				continue
			}
			byPart[rec.GetPartition()] = append(byPart[rec.GetPartition()], check.Record{Partition: rec.GetPartition(), Offset: rec.GetOffset(), Value: rec.GetId()})
			got++
		}
	}
	var out []check.Record
	for p := range int32(partitions) {
		out = append(out, byPart[p]...)
	}
	return out, nil
}

// writeHistory keeps the run's history and result in its directory.
func (r *run) writeHistory(res check.Result) error {
	f, err := os.Create(filepath.Join(r.dir, "history.jsonl"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	r.mu.Lock()
	for _, o := range r.ops {
		_ = enc.Encode(o)
	}
	r.mu.Unlock()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := writeLinearization(res, filepath.Join(r.dir, "linearization.html")); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	return os.WriteFile(filepath.Join(r.dir, "result.json"), b, 0o644)
}

// writeLinearization keeps porcupine's page of a failed linearizability
// check (nothing when it passed).
func writeLinearization(res check.Result, path string) error {
	var page bytes.Buffer
	if wrote, err := res.Visualize(&page); err != nil || !wrote {
		return err
	}
	return os.WriteFile(path, page.Bytes(), 0o644)
}

func envInt(name string, def int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	return cmp.Or(map[bool]int{true: v}[err == nil && v > 0], def)
}
