package grpcbuf

import (
	"bytes"
	"sync"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// withUnknown returns m with unknown fields of every wire type after its
// own (as a newer peer's message decodes).
func withUnknown(t testing.TB, m proto.Message) proto.Message {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 900, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40)
	b = protowire.AppendTag(b, 901, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("from a newer version"))
	b = protowire.AppendTag(b, 902, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 903, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 8)
	b = protowire.AppendTag(b, 904, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 904, protowire.EndGroupType)
	out := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if len(out.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("no unknown fields decoded")
	}
	return out
}

func i32(v int32) *int32 { return &v }

// codecCases are the messages of the hot paths, as they are sent, empty,
// and with what only a newer peer would send. deterministic is false for
// those with more than one map entry: Go's map order makes their bytes
// differ from one marshal to the next, on either path.
func codecCases(t testing.TB) []struct {
	name          string
	m             proto.Message
	deterministic bool
} {
	publish := benchPublish()
	publish.Messages[1].Partition = i32(0) // present, and zero
	publish.Messages[2].Partition = i32(5)
	publish.Messages[3].Key = nil
	publish.Messages[4].Payload = []byte{}
	publish.Messages[5].Headers = nil
	manyHeaders := benchPublish()
	manyHeaders.Messages[0].Headers = map[string]string{"a": "1", "b": "", "": "empty key", "ünïcode": "☃"}
	subscribe := &spoolv1.SubscribeRequest{
		Start:  &spoolv1.Start{Group: "billing", Topics: []string{"orders", "refunds"}, MaxInFlight: 64, ConsumerName: "worker-1", AppVersion: "1.2.3", MaxReceiveBytes: 4 << 20},
		Credit: 32,
	}
	acks := &spoolv1.SubscribeRequest{Credit: 3}
	for i := range 3 {
		ref := &spoolv1.DeliveryRef{Topic: "orders", Partition: int32(i), Offset: int64(100 + i), FencingToken: uint64(9 + i)}
		acks.Acks = append(acks.Acks, &spoolv1.Ack{Ref: ref})
		acks.Nacks = append(acks.Nacks, &spoolv1.Nack{Ref: ref, Outcome: spoolv1.Outcome_OUTCOME_RETRY, RetryAfterMs: 500, Reason: "timeout", Error: "upstream said 503", Downstream: "payments"})
		acks.Extends = append(acks.Extends, &spoolv1.Extend{Ref: ref, ExtendByMs: 30000})
	}
	deliveries := benchDeliveries()
	deliveries.Started = &spoolv1.Started{Group: "billing", Topics: []string{"orders"}, MaxInFlight: 64, VisibilityTimeoutMs: 30000, MaxFrameBytes: 4 << 20}
	deliveries.SettleErrors = []*spoolv1.SettleError{{Ref: &spoolv1.DeliveryRef{Topic: "orders", Offset: 3}, Reason: "STALE_FENCING_TOKEN", Message: "the lease moved on"}}
	deliveries.Deliveries[0].LastError = "boom"
	deliveries.Deliveries[0].Attempt = 2
	batch := &clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Batch{Batch: &clusterv1.Batch{
		Heartbeats: &clusterv1.Heartbeats{GroupIds: []uint64{1, 2, 1 << 60}, Froms: []uint64{1, 1, 1}, Tos: []uint64{2, 3, 2}, Terms: []uint64{5, 5, 6}, Commits: []uint64{100, 0, 7}, Responses: []bool{true, false, true}},
		Messages:   []*clusterv1.GroupMessage{{GroupId: 4, Message: bytes.Repeat([]byte("raft"), 300)}, {GroupId: 5, Message: []byte{}}},
	}}}
	return []struct {
		name          string
		m             proto.Message
		deterministic bool
	}{
		{"PublishStreamRequest", publish, true},
		{"PublishStreamRequest/many headers", manyHeaders, false},
		{"PublishStreamRequest/unknown fields", withUnknown(t, publish), true},
		{"PublishStreamRequest/empty", &spoolv1.PublishStreamRequest{}, true},
		{"PublishRequest", &spoolv1.PublishRequest{Topic: "orders", Messages: publish.Messages, Acks: spoolv1.Acks_ACKS_LEADER}, true},
		{"PublishStreamResponse", &spoolv1.PublishStreamResponse{Sequence: 9, Results: []*spoolv1.PublishResult{{Id: "a", Partition: 1, Offset: 2}}, Error: &spoolv1.Error{Code: 8, Reason: "TOO_BIG", Message: "m"}}, true},
		{"SubscribeRequest/start", subscribe, true},
		{"SubscribeRequest/acks", acks, true},
		{"SubscribeRequest/unknown fields", withUnknown(t, acks), true},
		{"SubscribeRequest/empty", &spoolv1.SubscribeRequest{}, true},
		{"SubscribeResponse", deliveries, true},
		{"SubscribeResponse/unknown fields", withUnknown(t, deliveries), true},
		{"SubscribeResponse/empty", &spoolv1.SubscribeResponse{}, true},
		{"Ack/empty ref", &spoolv1.Ack{Ref: &spoolv1.DeliveryRef{}}, true},
		{"RaftRequest/batch", batch, true},
		{"RaftRequest/batch unknown fields", withUnknown(t, batch), true},
		{"RaftRequest/hello", &clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{Hello: &clusterv1.Hello{ClusterId: "c1", FromNode: 1, ToNode: 2, ProtocolVersion: 3}}}, true},
		{"RaftRequest/empty hello", &clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{Hello: &clusterv1.Hello{}}}, true},
		{"RaftRequest/nil hello", &clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{}}, true},
		{"RaftRequest/empty", &clusterv1.RaftRequest{}, true},
		{"SnapshotRequest/empty chunk", &clusterv1.SnapshotRequest{Frame: &clusterv1.SnapshotRequest_Chunk{Chunk: []byte{}}}, true},
		{"SnapshotResponse", &clusterv1.SnapshotResponse{}, true},
	}
}

// The codec's vtproto path writes protobuf-go's bytes and decodes them to
// protobuf-go's message, for every message of the hot paths; and nothing
// decoded refers to the frame it was decoded from.
func TestCodecVTMatchesProto(t *testing.T) {
	c := NewCodec(New())
	for _, tc := range codecCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.m.(vtMessage); !ok {
				t.Fatalf("%T has no vtproto methods: run make gen", tc.m)
			}
			want, err := proto.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			data, err := c.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			got := data.Materialize()
			data.Free()
			if tc.deterministic && !bytes.Equal(got, want) {
				t.Fatalf("the codec wrote\n%x\nprotobuf-go\n%x", got, want)
			}
			back := tc.m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, tc.m) {
				t.Fatalf("protobuf-go decodes the codec's bytes to %v (%v), want %v", back, err, tc.m)
			}

			// Decode from a frame in two pieces into a message that held
			// something else, then overwrite the frame.
			frame := bytes.Clone(want)
			pieces := mem.BufferSlice{mem.SliceBuffer(frame[:len(frame)/2]), mem.SliceBuffer(frame[len(frame)/2:])}
			whole := mem.BufferSlice{mem.SliceBuffer(frame)}
			for _, in := range []mem.BufferSlice{pieces, whole} {
				dec := proto.Clone(tc.m) // what merging would double
				dec.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
				if err := c.Unmarshal(in, dec); err != nil {
					t.Fatal(err)
				}
				for i := range frame {
					frame[i] = 0xff
				}
				if !proto.Equal(dec, tc.m) {
					t.Fatalf("decoded\n%v\nwant\n%v", dec, tc.m)
				}
				copy(frame, want)
			}
		})
	}
}

// A string that is not UTF-8 is refused on both paths, when marshalled and
// when unmarshalled, as protobuf-go refuses it.
func TestCodecVTRefusesInvalidUTF8(t *testing.T) {
	c := NewCodec(New())
	bad := "caf\xe9"
	for name, m := range map[string]proto.Message{
		"topic":        &spoolv1.PublishStreamRequest{Topic: bad},
		"id":           &spoolv1.PublishStreamRequest{Messages: []*spoolv1.PublishMessage{{Id: bad}}},
		"header key":   &spoolv1.PublishStreamRequest{Messages: []*spoolv1.PublishMessage{{Headers: map[string]string{bad: "v"}}}},
		"header value": &spoolv1.PublishStreamRequest{Messages: []*spoolv1.PublishMessage{{Headers: map[string]string{"k": bad}}}},
		"ack topic":    &spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: &spoolv1.DeliveryRef{Topic: bad}}}},
		"delivery":     &spoolv1.SubscribeResponse{Deliveries: []*spoolv1.Delivery{{Payload: []byte("ok"), LastError: bad}}},
		"start topics": &spoolv1.SubscribeRequest{Start: &spoolv1.Start{Topics: []string{"ok", bad}}},
		"hello":        &clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{Hello: &clusterv1.Hello{ClusterId: bad}}},
	} {
		if _, err := proto.Marshal(m); err == nil {
			t.Fatalf("%s: protobuf-go marshals invalid UTF-8", name)
		}
		if _, err := c.Marshal(m); err == nil {
			t.Errorf("%s: the codec marshals invalid UTF-8", name)
		}
		// vtproto's own code writes what protobuf-go would refuse to.
		vm := m.(vtMessage)
		wire := make([]byte, vm.SizeVT())
		if _, err := vm.MarshalToSizedBufferVT(wire); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(wire, m.ProtoReflect().New().Interface()); err == nil {
			t.Fatalf("%s: protobuf-go unmarshals invalid UTF-8", name)
		}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, m.ProtoReflect().New().Interface()); err == nil {
			t.Errorf("%s: the codec unmarshals invalid UTF-8", name)
		}
	}
}

// Streams share a codec: its first messages, decoded and encoded at once
// by several goroutines, make its plans of the messages safely (-race).
func TestCodecConcurrentFirstUse(t *testing.T) {
	c := NewCodec(New())
	cases := codecCases(t)
	var wg sync.WaitGroup
	for range 4 {
		for _, tc := range cases {
			wg.Go(func() {
				wire, err := proto.Marshal(tc.m)
				if err != nil {
					t.Error(err)
					return
				}
				m := tc.m.ProtoReflect().New().Interface()
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, m); err != nil || !proto.Equal(m, tc.m) {
					t.Errorf("%s: %v", tc.name, err)
				}
				data, err := c.Marshal(m)
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					return
				}
				data.Free()
			})
		}
	}
	wg.Wait()
}

// undersized is a publish request whose SizeVT is one byte short, as a
// message that grew while it was marshalled would be.
type undersized struct{ *spoolv1.PublishStreamRequest }

func (u undersized) SizeVT() int { return u.PublishStreamRequest.SizeVT() - 1 }

// A message larger than its size (changed while marshalled) makes the
// generated code write out of its buffer: the codec does not panic, it
// falls back to protobuf-go, which sizes it again, as before vtproto.
func TestCodecVTMessageLargerThanItsSize(t *testing.T) {
	c := NewCodec(New())
	for _, m := range []*spoolv1.PublishStreamRequest{{Topic: "t"}, benchPublish()} {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(undersized{m})
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the codec wrote %x, want %x", len(want), got, want)
		}
		data.Free()
	}
}
