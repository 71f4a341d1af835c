package grpcbuf

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// FuzzCodecUnmarshal feeds any bytes to the codec as the messages spoold
// reads most (publish requests, subscribe frames with their acks): it never
// panics, and fails or succeeds as proto.Unmarshal does, with an equal
// message.
func FuzzCodecUnmarshal(f *testing.F) {
	for _, tc := range codecCases(f) {
		b, err := proto.Marshal(tc.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// What vtproto's code reads otherwise than protobuf-go: a varint of 65
	// bits, a known field with another wire type, a map entry's key as a
	// varint, a string of invalid UTF-8, an end group of another number, an
	// unknown field's tag in more bytes than it needs, a field number above
	// 2^29 (the last two found by this fuzzer).
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 5))
	f.Add([]byte{0x1a, 0x06, 0x22, 0x04, 0x08, 0x02, 0x12, 0x00})
	f.Add([]byte{0x12, 0x02, 0xc3, 0x28})
	f.Add([]byte{0x9b, 0x01, 0x08, 0x01, 0xa4, 0x01})
	f.Add([]byte{0xb5, 0x00, 0x30, 0x30, 0x30, 0x30})
	f.Add([]byte{0x82, 0x82, 0x82, 0x82, 0x30, 0x00})
	c := NewCodec(New())
	types := []func() proto.Message{
		func() proto.Message { return new(spoolv1.PublishStreamRequest) },
		func() proto.Message { return new(spoolv1.PublishRequest) },
		func() proto.Message { return new(spoolv1.SubscribeRequest) },
		func() proto.Message { return new(spoolv1.Ack) },
		func() proto.Message { return new(spoolv1.Nack) },
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newMsg := range types {
			want, got := newMsg(), newMsg()
			wantErr := proto.Unmarshal(b, want)
			err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("%T from %x: the codec says %v, protobuf-go %v", got, b, err, wantErr)
			}
			if err == nil && !proto.Equal(got, want) {
				t.Fatalf("%T from %x: the codec decoded\n%v\nprotobuf-go\n%v", got, b, got, want)
			}
		}
	})
}
