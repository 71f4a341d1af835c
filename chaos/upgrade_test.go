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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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
//   - upgrade: a fourth node of this tree joins the cluster of the previous
//     release, then every node of it, one at a time, is replaced by this
//     tree's; each step moves a replica or a leader (moveOne, as the
//     membership kind does: a cluster of mixed releases moves replicas);
//     then the cluster is finalized (AdminService.FinalizeClusterVersion)
//     and every node must report the new cluster version. Later steps only
//     move replicas and leaders.
//   - rollback: two nodes up to this tree; finalizing must be refused (the
//     third runs the previous release); then both back to the previous
//     release (a downgrade reads the data dirs the newer release wrote).
func init() {
	faults["upgrade"] = faultKind{previous: true, graceful: true, extraNode: true, holdMs: [2]int{1000, 3000},
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
	first %= nodes
	if r.procs[nodes] == nil { // a node of this release joins the old cluster
		r.bins[nodes] = spooldBin
		if err := r.start(nodes); err != nil {
			return err
		}
		if err := r.awaitReady(60 * time.Second); err != nil {
			return err
		}
		r.startWork(nodes)
		r.rolled[nodes] = true
		r.record(op{Kind: "join", Node: nodes, Err: fmt.Sprintf("n%d of this release joins", nodes+1)})
	}
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
		r.moveOne(-1)
		r.sleep(hold)
		return nil
	}
	if err := r.awaitVersions(buildinfo.Version); err != nil {
		return err
	}
	v, err := r.finalize(first)
	if err != nil {
		return fmt.Errorf("finalizing once every node runs this release: %w", err)
	}
	return r.awaitClusterVersion(v)
}

// rollBack replaces two nodes (first and the next) with this tree's spoold,
// then puts the previous release back on both, and checks that every node
// answers as the previous release. Later steps only move leaders.
func (r *run) rollBack(first int, hold time.Duration) error {
	if r.rolled[first] {
		r.moveOne(-1)
		r.sleep(hold)
		return nil
	}
	two := []int{first, (first + 1) % nodes}
	for _, i := range two {
		if err := r.step(i, spooldBin, hold); err != nil {
			return err
		}
	}
	// The third node runs the previous release: no finalization.
	if v, err := r.finalize(first); status.Code(err) != codes.FailedPrecondition {
		return fmt.Errorf("finalizing with node %d on release %s: version %d, %v; want FAILED_PRECONDITION", (first+2)%nodes+1, previous.rel.Version, v, err)
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
	r.moveOne(i)
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

// finalize asks node via's AdminService to finalize the cluster version
// and returns the version it is at then.
func (r *run) finalize(via int) (uint32, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(via), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := spoolv1.NewAdminServiceClient(conn).FinalizeClusterVersion(ctx, &spoolv1.FinalizeClusterVersionRequest{})
	r.record(op{Kind: "damage", Node: via, Offset: int64(resp.GetClusterVersion()), Err: fmt.Sprintf("finalize: %v", err)})
	return resp.GetClusterVersion(), err
}

// awaitClusterVersion waits until every node says the cluster is at v.
func (r *run) awaitClusterVersion(v uint32) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := range r.n {
		for {
			st, err := r.status(i)
			if err == nil && st.GetClusterVersion() == v {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %d says the cluster version is %d (%v), want %d", i+1, st.GetClusterVersion(), err, v)
			}
			time.Sleep(200 * time.Millisecond) // sleep-ok: polling the nodes' view of the controller
		}
	}
	return nil
}

// awaitVersions waits until every node's AdminService says it is release
// version (ClusterStatus answers with the answering spoold's version).
func (r *run) awaitVersions(version string) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := range r.n {
		if r.procs[i] == nil {
			continue
		}
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
	st, err := r.status(i)
	return st.GetVersion(), err
}

// status is node i's AdminService.ClusterStatus.
func (r *run) status(i int) (*spoolv1.ClusterStatusResponse, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", r.net.IP(i), adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return spoolv1.NewAdminServiceClient(conn).ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
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
