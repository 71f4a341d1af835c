package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// OpenFiles (spool_open_files, and the budget guards.max_open_files is
// checked against) counts every file the node keeps open in its data dir:
// the log's segments and each raft group's state file, one per replica.
func TestClusterOpenFilesCountsEveryReplicaFile(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc/self/fd")
	}
	tc := newTestCluster(t, 3)
	n := tc.nodes[0]
	if err := n.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.EvalSymlinks(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "OpenFiles to count the files open in the data dir", func() error {
		held := 0
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return err
		}
		for _, e := range ents {
			target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
			if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
				if fi, err := os.Stat(target); err == nil && !fi.IsDir() {
					held++
				}
			}
		}
		if got := n.n.OpenFiles(); got != held {
			return fmt.Errorf("OpenFiles = %d, files open in the data dir = %d", got, held)
		}
		return nil
	})
}
