package deliver

import (
	"slices"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// A partition restarted from a committed position with finished offsets
// above next commits a valid position once its tracker reaches one of
// them: next moves past it (it committed "next 56, finished [56]", which
// the group coordinator refuses, so every later commit failed; found by
// TestBackendJetStream/sidecar_restart with the NATS-kept coordinator).
func TestPositionMovesPastRestoredFinishedOffsets(t *testing.T) {
	tr, err := tracker.New[engine.Record](tracker.Config{MaxInFlight: 16, VisibilityTimeout: time.Minute}, 56)
	if err != nil {
		t.Fatal(err)
	}
	p := &part{tr: tr, skip: []int64{56, 57, 59}}
	got := p.position()
	if got.Next != 58 || !slices.Equal(got.Done, []int64{59}) {
		t.Fatalf("position = next %d, finished %v; want next 58, finished [59]", got.Next, got.Done)
	}
}
