package publish

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// acksSeen is a real engine that records the acks of every append it is
// asked for (what a single node does with them is the same: a cluster
// test in engine/ shows the difference).
type acksSeen struct {
	*embedded.Node
	mu   sync.Mutex
	acks []engine.Acks
}

func (a *acksSeen) ProduceWith(topic string, p int32, recs []engine.Record, opts engine.ProduceOptions, done func(int64, error)) {
	a.mu.Lock()
	a.acks = append(a.acks, opts.Acks)
	a.mu.Unlock()
	a.Node.ProduceWith(topic, p, recs, opts, done)
}

func (a *acksSeen) take() []engine.Acks {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.acks
	a.acks = nil
	return out
}

// The acks of a Publish and of each PublishStream request reach the
// engine for every partition's append: unset and ACKS_ALL as AcksAll,
// ACKS_LEADER as AcksLeader; a value this sidecar does not know is
// refused (INVALID_REQUEST) and nothing is appended.
func TestPublishPassesAcks(t *testing.T) {
	eng := &acksSeen{Node: node(t)}
	s, _ := server(t, eng, Limits{})
	keyed := func(k string) *spoolv1.PublishMessage {
		return &spoolv1.PublishMessage{Key: []byte(k), Payload: []byte("x")}
	}
	msgs := []*spoolv1.PublishMessage{keyed("a"), keyed("b"), keyed("c"), keyed("d"), keyed("e")}
	parts := map[int32]bool{}
	for _, m := range msgs {
		parts[engine.PartitionForKey(m.GetKey(), 4)] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		acks spoolv1.Acks
		want engine.Acks
	}{{spoolv1.Acks_ACKS_UNSPECIFIED, engine.AcksAll}, {spoolv1.Acks_ACKS_ALL, engine.AcksAll}, {spoolv1.Acks_ACKS_LEADER, engine.AcksLeader}} {
		resp, err := s.Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: msgs, Acks: c.acks})
		if err != nil || len(resp.GetResults()) != len(msgs) {
			t.Fatalf("%v: %v", c.acks, err)
		}
		if got := eng.take(); len(got) != len(parts) || slices.ContainsFunc(got, func(a engine.Acks) bool { return a != c.want }) {
			t.Fatalf("%v: the engine was asked for %v, want %v for each of %d partitions", c.acks, got, c.want, len(parts))
		}
	}
	_, st := publish(t, s, "orders", keyed("a")) // through the helper: unset
	if st.Code() != codes.OK || !slices.Equal(eng.take(), []engine.Acks{engine.AcksAll}) {
		t.Fatalf("unset acks: %v", st)
	}
	_, err := s.Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: msgs, Acks: spoolv1.Acks(7)})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || reasonOfStatus(st) != "INVALID_REQUEST" {
		t.Fatalf("unknown acks: %v", err)
	}
	if got := eng.take(); len(got) != 0 {
		t.Fatalf("unknown acks appended: %v", got)
	}

	stream, err := client(t, s).PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, acks := range []spoolv1.Acks{spoolv1.Acks_ACKS_LEADER, spoolv1.Acks_ACKS_ALL} {
		if err := stream.Send(&spoolv1.PublishStreamRequest{Sequence: uint64(i + 1), Topic: "orders", Messages: []*spoolv1.PublishMessage{keyed("a")}, Acks: acks}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || resp.GetError() != nil {
			t.Fatalf("stream request %d: %v %v", i+1, err, resp.GetError())
		}
	}
	if got := eng.take(); !slices.Equal(got, []engine.Acks{engine.AcksLeader, engine.AcksAll}) {
		t.Fatalf("stream: the engine was asked for %v", got)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("the stream did not end")
	}
}
