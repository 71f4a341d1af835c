package grpcbuf

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The codec's bytes are proto's, whatever stale bytes the pooled buffer
// held (a larger message marshalled into it before), and they decode back;
// a message read in several pieces too; a value that is not a proto
// message is an error.
func TestCodec(t *testing.T) {
	c := NewCodec(New())
	for _, n := range []int{10, 100 << 10, 60 << 10, 100<<10 - 1} {
		m := wrapperspb.Bytes(bytes.Repeat([]byte{byte(n)}, n))
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the codec's encoding differs from proto's", n)
		}
		var back wrapperspb.BytesValue
		pieces := mem.BufferSlice{mem.SliceBuffer(want[:len(want)/2]), mem.SliceBuffer(want[len(want)/2:])}
		if err := c.Unmarshal(pieces, &back); err != nil || !bytes.Equal(back.GetValue(), m.GetValue()) {
			t.Fatalf("%d bytes in two pieces: decoded %d bytes, %v", n, len(back.GetValue()), err)
		}
		data.Free()
	}
	if _, err := c.Marshal("text"); err == nil || !strings.Contains(err.Error(), "not a proto message") {
		t.Fatalf("marshal a string: %v", err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, new(int)); err == nil {
		t.Fatal("unmarshal into an int: no error")
	}
}
