package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/internal/testrelease"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// TestClusterMixedWithPreviousRelease runs a cluster of the previous
// release's spoold (built from the commit RELEASES names) and this tree's,
// side by side as during a rolling upgrade: a node of this release joins
// through a node of the previous one, and one of the previous release joins
// through a node of this one (each side reads the other's Join and Hello
// with the fields it does not know); the controller's state stays readable
// by both (cluster version 1); a topic placed on all three takes publishes
// through every node; this release's nodes report the others as speaking
// cluster version 1 only, and finalizing is refused naming one of them.
// Then the 0.1.0 nodes are upgraded in place, the cluster is finalized, and
// a node rolled back to 0.1.0 afterwards is refused by its peers (it cannot
// tell by itself) and told why, while the other two serve.
//
// The previous release is built once per machine and kept under the user's
// cache directory by commit (internal/testrelease; shared with the
// conformance matrix and the upgrade runs).
func TestClusterMixedWithPreviousRelease(t *testing.T) {
	old := previousSpoold(t)
	sc := &spoolCluster{t: t, creds: newPeerCreds(t), tail: clusterTopics, bin: old}
	sc.addNode() // n1: the previous release creates the cluster
	sc.bin = ""
	sc.addNode() // n2: this release joins through n1
	sc.bin = old
	sc.addNode() // n3: the previous release joins through n1 and n2
	sc.bin = ""
	awaitPlaced(t, sc.nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, n := range sc.nodes {
		eventually(t, 30*time.Second, fmt.Sprintf("a publish through n%d", i+1), func() bool {
			_, err := n.publisherClient().Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{{Key: []byte("k"), Payload: []byte(fmt.Sprint(i))}}})
			return err == nil
		})
	}
	newNode := sc.nodes[1]
	eventually(t, 30*time.Second, "the new node sees the others speaking cluster version 1 only", func() bool {
		st, err := newNode.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil || len(st.GetNodes()) != 3 || st.GetClusterVersion() != 1 || st.GetClusterVersionAvailable() != 1 {
			return false
		}
		olds := 0
		for _, ni := range st.GetNodes() {
			if ni.GetReleaseVersion() == "" && ni.GetClusterVersionMin() == 1 && ni.GetClusterVersionMax() == 1 && ni.GetAlive() {
				olds++
			}
		}
		return olds == 2
	})
	_, err := newNode.adminClient().FinalizeClusterVersion(ctx, &spoolv1.FinalizeClusterVersionRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "speaks cluster versions 1..1 only") {
		t.Fatalf("finalizing a mixed cluster: %v", err)
	}
	t.Logf("finalizing a mixed cluster: %v", err)

	// Upgrade the two 0.1.0 nodes (same data dirs), finalize, then roll n3
	// back to 0.1.0: the others refuse its raft streams, telling it why.
	for _, i := range []int{0, 2} {
		sc.nodes[i].stop()
		sc.nodes[i].bin = ""
		sc.nodes[i].start()
	}
	eventually(t, 60*time.Second, "every node upgraded, a finalization pending", func() bool {
		st, err := newNode.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		return err == nil && st.GetClusterVersion() == 1 && st.GetClusterVersionAvailable() == 2
	})
	if _, err := newNode.adminClient().FinalizeClusterVersion(ctx, &spoolv1.FinalizeClusterVersionRequest{}); err != nil {
		t.Fatalf("finalizing after the upgrade: %v", err)
	}
	n3 := sc.nodes[2]
	n3.stop()
	n3.bin = old
	n3.launch()
	eventually(t, 30*time.Second, "n3, rolled back to 0.1.0 after finalizing, told why its peers refuse it", func() bool {
		b, _ := os.ReadFile(n3.logPath)
		return strings.Contains(string(b), "the cluster is at cluster version 2, and the node's release speaks cluster versions 1..1")
	})
	eventually(t, 30*time.Second, "n3 reported unreachable", func() bool {
		st, err := newNode.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil {
			return false
		}
		for _, ni := range st.GetNodes() {
			if ni.GetAlive() != (ni.GetAddress() != n3.peer) {
				return false
			}
		}
		return true
	})
	for _, n := range sc.nodes[:2] {
		eventually(t, 30*time.Second, "a publish through an upgraded node", func() bool {
			_, err := n.publisherClient().Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{{Key: []byte("k"), Payload: []byte("after")}}})
			return err == nil
		})
	}
}

// previousSpoold is the previous release's spoold (internal/testrelease:
// built from the commit RELEASES names, once per machine).
func previousSpoold(t *testing.T) string {
	t.Helper()
	rel, err := testrelease.Previous()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testrelease.Spoold(rel, "")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
