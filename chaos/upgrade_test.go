package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/chaos/check"
	"github.com/spoolmq/spool/chaos/netns"
	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/testrelease"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// The rolling-upgrade runs (docs/upgrading.md): the fault suite's cluster,
// workload (producers and a consumer group with the Redis ledger through
// every sidecar) and checker, with an operator's upgrade for its faults.
// Every node starts on the previous release (the last line of RELEASES,
// built from the repository's history by internal/testrelease as a test
// build, like spooldBin); each step moves a partition's preferred leader
// through a drawn node's AdminService (a controller command in a cluster of
// mixed releases), then replaces one node's spoold as an operator (or a
// rollout) does: SIGTERM, the drain, the other release's binary on the same
// data dir. A step is a check.Fault with Graceful set: no message may be
// completed twice around it. The runs end by asking each node which release
// answers.
//
//   - upgrade: every node, one at a time, from the previous release to this
//     tree; later steps move leaders only.
//   - rollback: two nodes up to this tree, then both back to the previous
//     release before the cluster is finalized (a downgrade reads the data
//     dirs the newer release wrote).
func init() {
	faults["upgrade"] = faultKind{previous: true, graceful: true, holdMs: [2]int{1000, 3000},
		inject: func(r *run, i int, hold time.Duration) error {
			return r.upgradeAll(i, hold)
		}}
	faults["rollback"] = faultKind{previous: true, graceful: true, holdMs: [2]int{1000, 3000},
		inject: func(r *run, i int, hold time.Duration) error {
			return r.rollBack(i, hold)
		}}
}

var previous struct {
	once sync.Once
	rel  testrelease.Release
	bin  string
	err  error
}

// previousSpoold is the previous release's spoold, built once.
func previousSpoold() (string, error) {
	previous.once.Do(func() {
		if previous.rel, previous.err = testrelease.Previous(); previous.err == nil {
			previous.bin, previous.err = testrelease.Spoold(previous.rel, "spoolfaults")
		}
	})
	return previous.bin, previous.err
}

// upgradeAll replaces every node still on the previous release with this
// tree's spoold, from node first on, each step held for hold, then checks
// that every node answers as this release. Once every node runs this tree,
// a step only moves a leader.
func (r *run) upgradeAll(first int, hold time.Duration) error {
	rolled := 0
	for k := range nodes {
		i := (first + k) % nodes
		if r.rolled[i] {
			continue
		}
		if err := r.step(i, spooldBin, hold); err != nil {
			return err
		}
		r.rolled[i] = true
		rolled++
	}
	if rolled == 0 {
		r.moveLeader(first)
		r.sleep(hold)
		return nil
	}
	return r.awaitVersions(buildinfo.Version)
}

// rollBack replaces two nodes (first and the next) with this tree's spoold,
// then puts the previous release back on both, and checks that every node
// answers as the previous release. Later steps only move leaders.
func (r *run) rollBack(first int, hold time.Duration) error {
	if r.rolled[first] {
		r.moveLeader(first)
		r.sleep(hold)
		return nil
	}
	two := []int{first, (first + 1) % nodes}
	for _, i := range two {
		if err := r.step(i, spooldBin, hold); err != nil {
			return err
		}
	}
	for _, i := range two {
		if err := r.step(i, previous.bin, hold); err != nil {
			return err
		}
	}
	for i := range r.rolled {
		r.rolled[i] = true
	}
	return r.awaitVersions(previous.rel.Version)
}

// step moves a leader, then replaces node i's spoold with bin (SIGTERM,
// the drain, bin on the same data dir) and waits until it is ready; the
// step is recorded as a graceful fault of node i, held for hold after the
// node is back (the run's end does not cut it short: a rollout finishes).
func (r *run) step(i int, bin string, hold time.Duration) error {
	from := time.Now()
	r.moveLeader(i)
	r.record(op{Kind: "damage", Node: i, Err: "replace spoold with " + bin})
	p := r.procs[i]
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node %d did not stop within 30 s of SIGTERM", i+1)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("node %d exited with code %d after SIGTERM (its log: n%d.log)", i+1, code, i+1)
	}
	r.bins[i] = bin
	if err := r.start(i); err != nil {
		return err
	}
	if err := r.awaitReady(60 * time.Second); err != nil {
		return err
	}
	time.Sleep(hold) // sleep-ok: the step's hold, drawn from the seed
	r.mu.Lock()
	r.flts = append(r.flts, check.Fault{Node: i, From: from, To: time.Now(), Graceful: true})
	r.mu.Unlock()
	return nil
}

// moveLeader makes another node the preferred leader of a partition drawn
// from the seed (AdminService.MoveReplicas with the same replicas in
// another order, through node via's admin port; leader balancing then
// moves the leadership). A refusal is recorded, not fatal: a move may be
// under way.
func (r *run) moveLeader(via int) {
	lt, err := r.listTopics(via)
	if err != nil {
		r.record(op{Kind: "skip", Node: via, Err: "no leader move: " + err.Error()})
		return
	}
	p := int32(r.rng.IntN(partitions))
	var replicas []string
	for _, ti := range lt.GetTopics() {
		for _, pi := range ti.GetPartitions() {
			if ti.GetName() == topic && pi.GetPartition() == p {
				replicas = pi.GetReplicas()
			}
		}
	}
	if len(replicas) < 2 {
		r.record(op{Kind: "skip", Node: via, Err: fmt.Sprintf("no leader move: partition %d has replicas %v", p, replicas)})
		return
	}
	rotated := append(append([]string{}, replicas[1:]...), replicas[0])
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(via), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = spoolv1.NewAdminServiceClient(conn).MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: topic, Partition: p, Replicas: rotated})
	what := fmt.Sprintf("partition %d's preferred leader %s (replicas %v)", p, rotated[0], rotated)
	if err != nil {
		r.record(op{Kind: "skip", Node: via, Partition: p, Err: "leader move refused: " + what + ": " + err.Error()})
		return
	}
	r.record(op{Kind: "damage", Node: via, Partition: p, Err: "leader move: " + what})
}

// awaitVersions waits until every node's AdminService says it is release
// version (ClusterStatus answers with the answering spoold's version).
func (r *run) awaitVersions(version string) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := range nodes {
		for {
			got, err := r.version(i)
			if err == nil && got == version {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %d answers as release %q (%v), want %s", i+1, got, err, version)
			}
			time.Sleep(200 * time.Millisecond) // sleep-ok: polling a restarted process
		}
	}
	return nil
}

// version is the release node i's spoold says it is.
func (r *run) version(i int) (string, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(i), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := spoolv1.NewAdminServiceClient(conn).ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
	return st.GetVersion(), err
}

// TestRollingUpgrade is the short form of `make upgrade-test` that `make
// test` runs: one upgrade run and one rollback run, each a few seconds of
// load beyond its steps.
func TestRollingUpgrade(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("the upgrade runs need network namespaces: %v", err)
	}
	if os.Getenv("SPOOL_CHAOS_FAULTS") != "" {
		t.Skip("SPOOL_CHAOS_FAULTS names the runs: TestChaos runs them")
	}
	seed := uint64(time.Now().UnixNano() % 1e9)
	for _, kind := range []string{"upgrade", "rollback"} {
		dir := t.TempDir()
		res, err := oneRun(t, kind, seed, 3*time.Second, dir, &fixedFault{After: time.Second, Hold: time.Second})
		if err != nil {
			t.Fatalf("%s seed %d: %v (replay: SPOOL_CHAOS_FAULTS=%s SPOOL_CHAOS_SEED=%d make chaos)", kind, seed, err, kind, seed)
		}
		if !res.OK() {
			t.Fatalf("%s seed %d broke a rule (replay: SPOOL_CHAOS_FAULTS=%s SPOOL_CHAOS_SEED=%d make chaos):\n%s", kind, seed, kind, seed, strings.Join(res.Violations, "\n"))
		}
		t.Logf("%s seed %d: %d acknowledged, %d duplicated (unknown outcomes), longest publish gap %v, longest from an acknowledgement to the first completion %v",
			kind, seed, res.Acked, res.Duplicated, res.LongestPublishGap.Round(time.Millisecond), res.LongestToCompletion.Round(time.Millisecond))
	}
}
