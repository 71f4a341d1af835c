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
// a Pool instead of gRPC's default pool: that codec takes the buffer of
// every message it marshals above 1 KiB, and of every message it reads in
// more than one piece, from the default pool, which zeroes it — an eighth
// of a cluster node's CPU under publish-rf3 (profile of 2026-12-01), after
// the transport's own buffers came from a Pool. Marshalling writes every
// byte of the buffer it takes and unmarshalling reads only what was
// copied in, so stale bytes are never seen.
type Codec struct{ pool *Pool }

var _ encoding.CodecV2 = Codec{}

// NewCodec returns a codec taking its buffers from pool.
func NewCodec(pool *Pool) Codec { return Codec{pool: pool} }

// Name is the proto codec's name: the content-subtype stays "proto".
func (Codec) Name() string { return "proto" }

// Marshal encodes v, a proto message.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("grpcbuf: cannot marshal a %T: not a proto message", v)
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

// Unmarshal decodes data into v, a proto message (bytes fields are
// copied: nothing refers to data afterwards).
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("grpcbuf: cannot unmarshal into a %T: not a proto message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
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
