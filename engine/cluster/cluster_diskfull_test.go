package cluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/raft"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// diskFullCluster is three nodes, each on its own in-memory file system
// (log.MemFS: its capacity is what fills), with topic orders of one
// partition placed on all three and a first record committed.
func diskFullCluster(t *testing.T) *testCluster {
	t.Helper()
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.fs = log.NewMemFS() })
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	awaitCond(t, 30*time.Second, "the topic placed on every node, and a leader", func() error {
		for _, cn := range tc.nodes {
			if part, err := cn.n.partition("orders", 0); err != nil || part.X.raftGroup == 0 || part.Log == nil {
				return fmt.Errorf("node at %s has no replica yet", cn.addr)
			}
		}
		if tc.leaderOf("orders", 0) == nil {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return tc
}

// fill leaves no free space on cn's file system (every write that grows a
// file fails with ENOSPC) and returns when.
func fill(cn *clusterNode) time.Time {
	cn.fs.SetCapacity(cn.fs.Used())
	return time.Now()
}

// publishBound is what docs/semantics.md promises after a fault: an
// election timeout (at most twice the configured one, raft's randomised
// timeout) plus 2 s.
func publishBound(tick time.Duration) time.Duration {
	return 2*time.Duration(raft.DefaultElectionTicks)*tick + 2*time.Second
}

// publishUntilAcked publishes through cn, each attempt bounded by a 1 s
// deadline, until one is acknowledged (or 20 s pass: the test fails); it
// returns when, and the errors of the attempts before.
func publishUntilAcked(t *testing.T, cn *clusterNode, prefix string) (time.Time, []string) {
	t.Helper()
	var errs []string
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		r := <-produceAsync(cn.n, "orders", 0, fmt.Sprintf("%s-%d", prefix, i), engine.ProduceOptions{Context: ctx})
		cancel()
		if r.err == nil {
			return time.Now(), errs
		}
		errs = append(errs, r.err.Error())
		if len(errs) > 20 {
			t.Fatalf("no publish through the node at %s acknowledged after %d attempts; errors: %q", cn.addr, len(errs), errs)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			time.Sleep(100*time.Millisecond - d) // sleep-ok: pacing a client's retries, as an app would
		}
	}
}

// TestClusterDiskFullLeaderForwards (defect 14): the disk of the
// partition's leader fills. Its replica stops (ENOSPC), and from then on
// it claims no leadership: the other two elect a leader, publishes through
// the full node are forwarded there and acknowledged within an election
// timeout + 2 s of the fill, and the full node's status names the real
// leader (what `spool topic describe` and spool_partition_leader show).
func TestClusterDiskFullLeaderForwards(t *testing.T) {
	tc := diskFullCluster(t)
	full := tc.leaderOf("orders", 0)
	at := fill(full)
	acked, errs := publishUntilAcked(t, full, "via-full")
	took := acked.Sub(at)
	t.Logf("the first publish through the full node acknowledged %v after the fill; errors before: %q", took.Round(time.Millisecond), errs)
	if bound := publishBound(20 * time.Millisecond); took > bound {
		t.Fatalf("first publish through the full node acknowledged %v after the fill, want within %v", took, bound)
	}
	leader := tc.leaderOf("orders", 0)
	if leader == nil || leader == full {
		t.Fatalf("the partition's leader after the fill: %v; want one of the other nodes", leader)
	}
	ls, _ := leader.n.ClusterStatus()
	awaitCond(t, 5*time.Second, "the full node's status naming the real leader", func() error {
		fs, _ := full.n.ClusterStatus()
		for _, r := range fs.Replicas {
			if r.Topic != "orders" {
				continue
			}
			if r.IsLeader || r.Leader != ls.NodeID || !strings.Contains(r.Err, "no space") {
				return fmt.Errorf("the full node says: leader %d (itself: %v), err %q; want leader %d and the stop error", r.Leader, r.IsLeader, r.Err, ls.NodeID)
			}
			return nil
		}
		return fmt.Errorf("the full node lists no replica of orders/0")
	})
}

// replicaOf is cn's status of its replica of orders/0.
func replicaOf(cn *clusterNode) (engine.ReplicaStatus, bool) {
	st, _ := cn.n.ClusterStatus()
	for _, r := range st.Replicas {
		if r.Topic == "orders" && r.Partition == 0 {
			return r, true
		}
	}
	return engine.ReplicaStatus{}, false
}

// TestClusterDiskFullReplicaReopens (defect 16): one node's disk fills —
// the partition's leader's, or a follower's; in the last case opening the
// replica's files fails too while the disk is full (a reopen then leaves
// it out of the host until the next). Its replica stops (disk_full) while
// publishes through the other nodes go on; the node logs the stop once
// however many reopens fail or stop again meanwhile. Once space returns
// its replica runs again and catches up with the leader's committed end,
// with the same records, within ReopenStoppedEvery + 2 s, without a
// restart; the recovery is logged once.
func TestClusterDiskFullReplicaReopens(t *testing.T) {
	for _, role := range []string{"leader", "follower", "follower, opening fails"} {
		t.Run(role, func(t *testing.T) {
			tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.fs, cn.logs = log.NewMemFS(), &logLines{} })
			if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
			awaitCond(t, 30*time.Second, "the topic placed on every node, and a leader", func() error {
				for _, cn := range tc.nodes {
					if part, err := cn.n.partition("orders", 0); err != nil || part.X.raftGroup == 0 || part.Log == nil {
						return fmt.Errorf("node at %s has no replica yet", cn.addr)
					}
				}
				if tc.leaderOf("orders", 0) == nil {
					return fmt.Errorf("no leader")
				}
				return nil
			})
			full := tc.leaderOf("orders", 0)
			if role != "leader" {
				for _, cn := range tc.nodes {
					if cn != full {
						full = cn
						break
					}
				}
			}
			var others []*clusterNode
			for _, cn := range tc.nodes {
				if cn != full {
					others = append(others, cn)
				}
			}
			fill(full)
			if role == "follower, opening fails" {
				part, _ := full.n.partition("orders", 0)
				dir := full.n.groupDir(part.X.raftGroup)
				full.fs.SetFault(func(op, name string) error {
					if op == "open" && strings.HasPrefix(name, dir) {
						return syscall.ENOSPC
					}
					return nil
				})
			}
			// Publishes through the others go on; the full node's replica
			// stops at its first write.
			sent := 0
			awaitCond(t, 10*time.Second, "the full node's replica stopped (disk_full)", func() error {
				if _, err := produce(others[sent%2].n, "orders", 0, fmt.Sprintf("while-full-%d", sent)); err == nil {
					sent++
				}
				if r, _ := replicaOf(full); r.StopReason != StopDiskFull {
					return fmt.Errorf("the full node's replica: err %q, reason %q", r.Err, r.StopReason)
				}
				return nil
			})
			// Still full for more than two reopen intervals.
			stillFull := time.Now().Add(2*DefaultReopenStoppedEvery + 500*time.Millisecond)
			for time.Now().Before(stillFull) {
				if _, err := produce(others[sent%2].n, "orders", 0, fmt.Sprintf("while-full-%d", sent)); err != nil {
					t.Fatalf("a publish through node at %s while the other's disk is full: %v", others[sent%2].addr, err)
				}
				sent++
			}
			// Reopened while full, the replica may run for a moment before
			// its next write stops it (what the log's cut tail freed may
			// even take a few appends): its episode stays open.
			if part, _ := full.n.partition("orders", 0); !full.n.asMember().stops.has(part.X.raftGroup) {
				r, _ := replicaOf(full)
				t.Fatalf("the full node's replica while still full is no longer taken for stopped (status: err %q, reason %q)", r.Err, r.StopReason)
			}
			if role == "follower, opening fails" { // the reopens failed: out of the host, still tracked
				part, _ := full.n.partition("orders", 0)
				if _, ok := full.n.asMember().host.Status(part.X.raftGroup); ok || !full.n.asMember().replicaStopped(part.X.raftGroup) {
					t.Fatalf("after failed reopens: on the host %v, stopped %v; want off the host and stopped", ok, full.n.asMember().replicaStopped(part.X.raftGroup))
				}
			}
			if n := full.logs.matching("a replica on this node stopped", "replica=orders-0"); n != 1 {
				t.Fatalf("the full node logged the stop of orders-0 %d times, want once", n)
			}
			if n := full.logs.matching("orders"); n != 1 {
				t.Fatalf("the full node logged %d lines about orders while full, want the stop's only: %q", n, full.logs.all())
			}
			full.fs.SetCapacity(0)
			full.fs.SetFault(nil)
			freed := time.Now()
			leader := tc.leaderOf("orders", 0)
			var caughtUp time.Duration
			awaitCond(t, 20*time.Second, "the full node's replica running and caught up", func() error {
				r, _ := replicaOf(full)
				if r.Err != "" {
					return fmt.Errorf("still stopped: %s", r.Err)
				}
				want, err := readAll(leader.n, "orders", 0)
				if err != nil {
					return err
				}
				got, err := readLocal(full) // its own log, not the others' (readsRemote)
				if err != nil {
					return err
				}
				if len(got) != len(want) {
					return fmt.Errorf("the full node holds %d committed records, the leader %d", len(got), len(want))
				}
				for i := range want {
					if string(got[i].Value) != string(want[i].Value) || got[i].Offset != want[i].Offset {
						return fmt.Errorf("record %d: %q at %d, the leader's %q at %d", i, got[i].Value, got[i].Offset, want[i].Value, want[i].Offset)
					}
				}
				caughtUp = time.Since(freed)
				return nil
			})
			t.Logf("%d records published while full; caught up %v after space returned", sent, caughtUp.Round(time.Millisecond))
			if bound := DefaultReopenStoppedEvery + 2*time.Second; caughtUp > bound {
				t.Fatalf("caught up %v after space returned, want within %v", caughtUp, bound)
			}
			awaitCond(t, 5*time.Second, "the recovery logged", func() error {
				if n := full.logs.matching("runs again", "replica=orders-0"); n != 1 {
					return fmt.Errorf("the recovery of orders-0 logged %d times, want once", n)
				}
				return nil
			})
			if st, _ := full.n.ClusterStatus(); st.ReplicasReopened == 0 {
				t.Fatalf("ReplicasReopened %d, want the reopen counted", st.ReplicasReopened)
			}
			// Every replica of the node runs again: the controller's and
			// the consumer groups' topic's too, if they stopped.
			awaitCond(t, 2*DefaultReopenStoppedEvery+2*time.Second, "no replica of the full node stopped", func() error {
				st, _ := full.n.ClusterStatus()
				for reason, n := range st.StoppedNow {
					if n != 0 {
						return fmt.Errorf("%d replicas stopped (%s)", n, reason)
					}
				}
				return nil
			})
		})
	}
}

// readLocal reads orders/0 from cn's own log, up to its own committed end.
func readLocal(cn *clusterNode) ([]log.Record, error) {
	part, err := cn.n.partition("orders", 0)
	if err != nil {
		return nil, err
	}
	var out []log.Record
	for off, end := int64(0), part.Committed.Load(); off < end; {
		recs, err := cn.n.tab.Read(part, off, 1<<20, nil)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("read at %d returned nothing below the end %d", off, end)
		}
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out, nil
}

// TestClusterDiskFullReadsFromReplicas (defect 15): while a node's replica
// is stopped (its disk full), what consumers on that node read does not
// stop at the replica's frozen end: its fetches and offsets go to the other
// replicas, and its watchers hear of the records committed there (a read
// of the end that the other replica answers as it moves). No other node
// reads from it.
func TestClusterDiskFullReadsFromReplicas(t *testing.T) {
	tc := diskFullCluster(t)
	full := tc.leaderOf("orders", 0)
	var other *clusterNode
	for _, cn := range tc.nodes {
		if cn != full {
			other = cn
			break
		}
	}
	watch := make(chan struct{}, 1)
	cancel, err := full.n.Watch([]string{"orders"}, watch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	fill(full)
	awaitCond(t, 10*time.Second, "the full node's replica stopped", func() error {
		_, _ = produce(other.n, "orders", 0, "while-full")
		if r, _ := replicaOf(full); r.Err == "" {
			return fmt.Errorf("still running")
		}
		return nil
	})
	select { // drain what the stop's time signalled
	case <-watch:
	default:
	}
	// Before the publish: the node hears of its commit as it happens (a
	// replica holds its read of the end until it moves), maybe before
	// this publish returns.
	committed := time.Now()
	var base int64
	awaitCond(t, 10*time.Second, "a publish through another node", func() (err error) {
		base, err = produce(other.n, "orders", 0, "after-stop")
		return err
	})
	awaitCond(t, 5*time.Second, "the full node reading the record committed elsewhere", func() error {
		_, end, err := full.n.Offsets("orders", 0)
		if err != nil {
			return err
		}
		if end <= base {
			return fmt.Errorf("the full node's committed end %d, the record is at %d", end, base)
		}
		recs, err := readAll(full.n, "orders", 0)
		if err != nil {
			return err
		}
		if len(recs) <= int(base) || string(recs[base].Value) != "after-stop" {
			return fmt.Errorf("the full node read %d records", len(recs))
		}
		return nil
	})
	select {
	case <-watch:
		t.Logf("the full node's watcher was signalled %v after the commit", time.Since(committed).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		t.Fatal("the full node's watcher was not signalled of a record committed on the others")
	}
	// The local log is untouched (its own committed end did not move
	// past what it holds), and other nodes do not read from it.
	if _, err := readLocal(full); err != nil {
		t.Fatalf("the full node's own log: %v", err)
	}
	part, _ := full.n.partition("orders", 0)
	if _, err := (&nodeService{c: full.n.asMember()}).Fetch(context.Background(), &clusterv1.FetchRequest{Topic: "orders", Partition: 0, Offset: 0, MaxBytes: 1 << 20}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a peer's fetch from the stopped replica (local end %d): %v, want Unavailable", part.Committed.Load(), err)
	}
}

// TestClusterDiskFullGivenUpReplicaNotReopened: a stopped replica the node
// then gives up (placement stops it: a move, a deletion) is not brought
// back by the reopens, though space returns.
func TestClusterDiskFullGivenUpReplicaNotReopened(t *testing.T) {
	tc := diskFullCluster(t)
	full := tc.leaderOf("orders", 0)
	var other *clusterNode
	for _, cn := range tc.nodes {
		if cn != full {
			other = cn
			break
		}
	}
	fill(full)
	awaitCond(t, 10*time.Second, "the full node's replica stopped", func() error {
		_, _ = produce(other.n, "orders", 0, "while-full")
		if r, _ := replicaOf(full); r.Err == "" {
			return fmt.Errorf("still running")
		}
		return nil
	})
	m := full.n.asMember()
	part, _ := full.n.partition("orders", 0)
	m.stopReplica(part)
	full.fs.SetCapacity(0)
	reopened := m.replicasReopened.Load()
	// Two reopen intervals: a reopen of the given-up replica would have run.
	deadline := time.Now().Add(2*DefaultReopenStoppedEvery + 500*time.Millisecond)
	for time.Now().Before(deadline) {
		if _, ok := m.host.Status(part.X.raftGroup); ok {
			t.Fatal("the given-up replica was added to the host again")
		}
		time.Sleep(50 * time.Millisecond) // sleep-ok: watching that something does not happen for a while
	}
	if n := m.replicasReopened.Load(); n != reopened || m.stops.has(part.X.raftGroup) {
		t.Fatalf("reopens %d (before %d), episode kept %v; want none and no episode", n, reopened, m.stops.has(part.X.raftGroup))
	}
}
