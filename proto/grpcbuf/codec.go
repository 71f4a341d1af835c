package grpcbuf

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Codec is gRPC's proto codec (google.golang.org/grpc/encoding/proto) with
// a Pool instead of gRPC's default pool, and with the marshal and unmarshal
// code that vtprotobuf generates for Spool's messages instead of
// protobuf-go's reflection.
//
// The pool: gRPC's codec takes the buffer of every message it marshals
// above 1 KiB, and of every message it reads in more than one piece, from
// the default pool, which zeroes it — an eighth of a cluster node's CPU
// under publish-rf3 (profile of 2026-12-01), after the transport's own
// buffers came from a Pool. Marshalling writes every byte of the buffer it
// takes and unmarshalling reads only what was copied in, so stale bytes are
// never seen.
//
// The generated code: proto.Unmarshal of publish requests was 6.5 % of
// spoold's CPU under the steady load test, and gRPC's marshal of delivery
// frames a few percent more. A message with vtproto's methods (every
// message of proto/spool) is encoded and decoded by them; any other
// message by protobuf-go. The result is protobuf-go's in every case:
// vtproto's code does not check what protobuf-go checks (strings are valid
// UTF-8, varints fit in 64 bits, a known field has its declared wire type),
// so the codec checks the wire bytes for those (wireValid) and lets
// protobuf-go decide whenever the check or vtproto fails — only for bytes
// that are malformed or carry invalid UTF-8.
type Codec struct {
	pool  *Pool
	plans *wirePlans
}

var _ encoding.CodecV2 = Codec{}

// vtMessage is what protoc-gen-go-vtproto generates (features marshal,
// unmarshal and size).
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// NewCodec returns a codec taking its buffers from pool.
func NewCodec(pool *Pool) Codec { return Codec{pool: pool, plans: newWirePlans()} }

// Name is the proto codec's name: the content-subtype stays "proto".
func (Codec) Name() string { return "proto" }

// Marshal encodes v, a proto message.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("grpcbuf: cannot marshal a %T: not a proto message", v)
	}
	if vm, ok := v.(vtMessage); ok {
		if data, ok := c.marshalVT(vm, m); ok {
			return data, nil
		}
		// A string that is not UTF-8, or a message changed while it was
		// marshalled: protobuf-go's error (or bytes, if it stopped
		// changing).
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil || len(out) != size {
		c.pool.Put(buf)
		if err == nil {
			err = fmt.Errorf("grpcbuf: a %T marshalled to %d bytes, its size was %d (changed while marshalled?)", v, len(out), size)
		}
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// marshalVT encodes vm with its generated code; false if protobuf-go would
// not have encoded it (a string that is not UTF-8: see wireValid), or if
// the message grew after it was sized: the generated code then writes
// below the buffer's start and panics, where protobuf-go's marshal (and
// this codec before it) returns an error.
func (c Codec) marshalVT(vm vtMessage, m proto.Message) (data mem.BufferSlice, ok bool) {
	size := vm.SizeVT()
	var buf *[]byte
	var b []byte
	if mem.IsBelowBufferPoolingThreshold(size) {
		b = make([]byte, size)
	} else {
		buf = c.pool.Get(size)
		b = *buf
	}
	defer func() {
		if recover() != nil || !ok {
			if buf != nil {
				c.pool.Put(buf)
			}
			data, ok = nil, false
		}
	}()
	n, err := vm.MarshalToSizedBufferVT(b)
	if err != nil || n != size || !wireValid(b, c.plans.of(m.ProtoReflect().Descriptor()), true) {
		return nil, false
	}
	if buf == nil {
		return mem.BufferSlice{mem.SliceBuffer(b)}, true
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, true
}

// Unmarshal decodes data into v, a proto message (bytes fields are
// copied: nothing refers to data afterwards).
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("grpcbuf: cannot unmarshal into a %T: not a proto message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	b := buf.ReadOnlyData()
	if vm, ok := v.(vtMessage); ok {
		proto.Reset(m) // UnmarshalVT merges; proto.Unmarshal replaces
		if vm.UnmarshalVT(b) == nil && wireValid(b, c.plans.of(m.ProtoReflect().Descriptor()), false) {
			return nil
		}
		// Malformed bytes, or a string that is not UTF-8: protobuf-go
		// decides (and resets the message vtproto may have half filled).
	}
	return proto.Unmarshal(b, m)
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}

// ServerCodec makes a server marshal and unmarshal with a Codec on a new
// pool.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(NewCodec(New())) }

// ClientCodec makes a client's calls marshal and unmarshal with a Codec on
// a new pool.
func ClientCodec() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(NewCodec(New())))
}
