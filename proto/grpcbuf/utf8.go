package grpcbuf

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// UTF8Refusals carries, from a server's codec to its interceptors, the
// requests that held a string field that is not valid UTF-8.
//
// Why not an error from the codec: gRPC answers every error of a codec's
// Unmarshal with INTERNAL ("failed to unmarshal"), before any interceptor
// runs, and an app cannot tell that from a bug of the sidecar. So a codec
// made by UTF8ServerCodec decodes such a request to an empty message,
// records the field here, and reports success; the server's first
// interceptor takes the record (Take) and answers INVALID_ARGUMENT naming
// the field. The bytes never reach a handler.
type UTF8Refusals struct {
	pending atomic.Int64 // entries in m: Take is one atomic load while none
	m       sync.Map     // the message decoded into (a pointer) → field path
}

// MaxUTF8Refusals bounds the records waiting for an interceptor. Each is
// taken right after its decode on the same goroutine, so a handful exist at
// a time; a server whose interceptors do not take them (a bug) gets gRPC's
// INTERNAL once this many are pending, never a growing map.
const MaxUTF8Refusals = 1024

// Take returns, and forgets, the field path recorded for m, a request
// just decoded.
func (r *UTF8Refusals) Take(m any) (field string, ok bool) {
	if r.pending.Load() == 0 {
		return "", false
	}
	v, ok := r.m.LoadAndDelete(m)
	if !ok {
		return "", false
	}
	r.pending.Add(-1)
	return v.(string), true
}

func (r *UTF8Refusals) put(m any, field string) bool {
	if r.pending.Add(1) > MaxUTF8Refusals {
		r.pending.Add(-1)
		return false
	}
	r.m.Store(m, field)
	return true
}

// utf8Codec is a Codec whose Unmarshal records invalid UTF-8 in r.
type utf8Codec struct {
	Codec
	r *UTF8Refusals
}

// UTF8ServerCodec is ServerCodec, except that a request with a string
// field that is not valid UTF-8 decodes to an empty message recorded in r
// (see UTF8Refusals). The server must take every record in its first
// interceptors.
func UTF8ServerCodec(r *UTF8Refusals) grpc.ServerOption {
	return grpc.ForceServerCodecV2(utf8Codec{NewCodec(New()), r})
}

var _ encoding.CodecV2 = utf8Codec{}

func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.Codec.Unmarshal(data, v)
	var bad interface{ InvalidUTF8() bool }
	if err == nil || !errors.As(err, &bad) || !bad.InvalidUTF8() {
		return err
	}
	m := messageOf(v)
	buf := data.MaterializeToBuffer(c.pool)
	field := badUTF8Field(buf.ReadOnlyData(), m.ProtoReflect().Descriptor())
	buf.Free()
	proto.Reset(m)
	if !c.r.put(v, field) {
		return err
	}
	return nil
}

// badUTF8Field is the path of the first string field of b, a message of
// md, that is not valid UTF-8, like "messages[1].headers.value"; "a string
// field" if b is too broken to say.
func badUTF8Field(b []byte, md protoreflect.MessageDescriptor) string {
	if p, ok := walkUTF8(b, md, 0); ok {
		return p
	}
	return "a string field"
}

// maxUTF8Depth bounds the nesting walkUTF8 follows (protobuf-go's own
// recursion limit is 10,000; Spool's messages nest a few levels).
const maxUTF8Depth = 100

func walkUTF8(b []byte, md protoreflect.MessageDescriptor, depth int) (string, bool) {
	if depth > maxUTF8Depth {
		return "", false
	}
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		name := string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, seen[num])
			seen[num]++
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if enforceUTF8(fd) && !utf8.Valid(v) {
				return name, true
			}
		case protoreflect.MessageKind, protoreflect.GroupKind:
			if p, ok := walkUTF8(v, fd.Message(), depth+1); ok {
				return name + "." + p, true
			}
		}
	}
	return "", false
}
