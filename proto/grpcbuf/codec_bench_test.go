package grpcbuf

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// protoOnly hides a message's vtproto methods: the codec takes protobuf-go's
// path for it.
type protoOnly struct{ proto.Message }

// benchPublish is a publish batch as the load tests send it: ten 1 KiB
// payloads with keys, ids and a header.
func benchPublish() *spoolv1.PublishStreamRequest {
	r := &spoolv1.PublishStreamRequest{Sequence: 12345, Topic: "orders", Acks: spoolv1.Acks_ACKS_ALL}
	for i := range 10 {
		r.Messages = append(r.Messages, &spoolv1.PublishMessage{
			Id:      fmt.Sprintf("0193a1b2-c3d4-7e5f-8a9b-%012d", i),
			Key:     fmt.Appendf(nil, "customer-%d", i),
			Payload: bytes.Repeat([]byte{byte(i)}, 1024),
			Headers: map[string]string{"content-type": "application/json"},
		})
	}
	return r
}

// benchDeliveries is a delivery frame of 32 messages of 1 KiB.
func benchDeliveries() *spoolv1.SubscribeResponse {
	r := &spoolv1.SubscribeResponse{}
	for i := range 32 {
		r.Deliveries = append(r.Deliveries, &spoolv1.Delivery{
			MessageId:           fmt.Sprintf("0193a1b2-c3d4-7e5f-8a9b-%012d", i),
			Topic:               "orders",
			Partition:           3,
			Offset:              int64(1000000 + i),
			Key:                 fmt.Appendf(nil, "customer-%d", i),
			Payload:             bytes.Repeat([]byte{byte(i)}, 1024),
			Headers:             map[string]string{"content-type": "application/json"},
			PublishTimeMs:       1764660000000,
			Attempt:             1,
			FirstDeliveryTimeMs: 1764660000100,
			LeaseDeadlineMs:     1764660030100,
			FencingToken:        uint64(7 + i),
			Group:               "billing",
		})
	}
	return r
}

// BenchmarkCodec marshals and unmarshals a publish batch and a delivery
// frame through the codec, on protobuf-go's path and on vtproto's.
func BenchmarkCodec(b *testing.B) {
	c := NewCodec(New())
	for _, msg := range []struct {
		name string
		m    proto.Message
		new  func() proto.Message
	}{
		{"publish10x1KiB", benchPublish(), func() proto.Message { return new(spoolv1.PublishStreamRequest) }},
		{"deliver32x1KiB", benchDeliveries(), func() proto.Message { return new(spoolv1.SubscribeResponse) }},
	} {
		wire, err := proto.Marshal(msg.m)
		if err != nil {
			b.Fatal(err)
		}
		for _, path := range []string{"proto", "vtproto"} {
			wrap := func(m proto.Message) any {
				if path == "proto" {
					return protoOnly{m}
				}
				return m
			}
			b.Run(msg.name+"/marshal/"+path, func(b *testing.B) {
				v := wrap(msg.m)
				b.SetBytes(int64(len(wire)))
				b.ReportAllocs()
				for b.Loop() {
					data, err := c.Marshal(v)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			})
			b.Run(msg.name+"/unmarshal/"+path, func(b *testing.B) {
				data := mem.BufferSlice{mem.SliceBuffer(wire)}
				b.SetBytes(int64(len(wire)))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Unmarshal(data, wrap(msg.new())); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
