package deliver

import (
	"testing"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// A Tail stream that does not read loses steps (counted) instead of
// blocking the delivery loop; steps go only to streams following their
// topic.
func TestTracedNeverBlocks(t *testing.T) {
	slow := &tap{topic: "orders", ch: make(chan *spoolv1.TailDelivery, 1)}
	other := &tap{topic: "jobs", ch: make(chan *spoolv1.TailDelivery, 1)}
	g := &Group{taps: []*tap{slow, other}}
	for i := range 3 {
		g.traced("orders", &spoolv1.TailDelivery{Offset: int64(i)})
	}
	if got := (<-slow.ch).GetOffset(); got != 0 {
		t.Fatalf("first step offset %d, want 0", got)
	}
	if n := slow.dropped.Load(); n != 2 {
		t.Fatalf("dropped %d steps, want 2", n)
	}
	if len(other.ch) != 0 || other.dropped.Load() != 0 {
		t.Fatalf("a stream following another topic got steps")
	}
}
