package transport

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// A drained queue keeps the other buffer as its backing array (no copying
// while busy); release gives it up once the lane is idle, and keeps what
// is queued.
func TestQueueRelease(t *testing.T) {
	q := newQueue(Limits{QueueLen: 1024, QueueBytes: 1 << 20})
	msgs := make([]Message, 100)
	sizes := make([]int, 100)
	for i := range msgs {
		msgs[i] = Message{Group: uint64(i + 1), Msg: raftpb.Message{Type: raftpb.MsgHeartbeat}}
		sizes[i] = 10
	}
	q.push(msgs, sizes)
	buf := q.drain(make([]Message, 0, 128))
	if len(buf) != 100 || cap(q.msgs) != 128 {
		t.Fatalf("drain: %d messages out, queue's room %d, want 100 and 128", len(buf), cap(q.msgs))
	}
	q.release()
	if cap(q.msgs) != 0 {
		t.Fatalf("an empty queue keeps room for %d messages after release", cap(q.msgs))
	}
	q.push(msgs[:1], sizes[:1])
	q.release()
	if out := q.drain(nil); len(out) != 1 {
		t.Fatalf("release lost what was queued: %d messages drained, want 1", len(out))
	}
}
