package cluster

import (
	"io"
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// The nodes start goroutines (completers, go done for unknown topics,
// replicas, the transport): every one must end once its work is done.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quietLogger discards, unless SPOOL_TEST_LOG is set (then it writes to
// stderr, for debugging a test).
func quietLogger() *slog.Logger {
	if os.Getenv("SPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// asMember is the role of a node that is a cluster member.
func (n *Node) asMember() *member { return n.role.(*member) }
