package grpcbuf

import (
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// What a wirePlan knows of a field: how its values are checked.
const (
	fieldUnknown     = iota // not in the message: any well-formed value
	fieldUTF8               // a string protobuf-go checks is valid UTF-8
	fieldBytes              // bytes, or a string protobuf-go does not check
	fieldMessage            // a message or a map entry: checked by its plan
	fieldVarint             // a number encoded as a varint
	fieldVarintList         // a repeated one, packed or not
	fieldUnsupported        // fixed-size numbers, groups: protobuf-go decides
)

// A wirePlan is what wireValid needs of a message descriptor, looked up
// once: reading descriptors field by field (lazily initialised, behind
// interfaces) took more than the generated decoding saved.
type wirePlan struct {
	fields []fieldPlan // by field number
	sparse map[protowire.Number]fieldPlan
	// utf8 is whether the message holds strings protobuf-go checks (or
	// messages that do): all wireValid looks for in what vtproto wrote.
	utf8 bool
}

type fieldPlan struct {
	kind uint8
	sub  *wirePlan // of a message field
}

// maxDenseField bounds wirePlan.fields; higher numbers go to sparse.
const maxDenseField = 256

func (p *wirePlan) field(num protowire.Number) fieldPlan {
	if int(num) < len(p.fields) {
		return p.fields[num]
	}
	return p.sparse[num]
}

// wirePlans holds the plans made so far, one per message descriptor.
type wirePlans struct {
	mu    sync.Mutex
	plans sync.Map // protoreflect.FullName → *wirePlan
}

func newWirePlans() *wirePlans { return &wirePlans{} }

// of returns md's plan, made on first use.
func (ps *wirePlans) of(md protoreflect.MessageDescriptor) *wirePlan {
	if p, ok := ps.plans.Load(md.FullName()); ok {
		return p.(*wirePlan)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	made := make(map[protoreflect.FullName]*wirePlan)
	p := ps.make(md, made)
	for name, p := range made { // shared only once complete
		ps.plans.Store(name, p)
	}
	return p
}

// make makes md's plan and those of the messages in it, into made
// (ps.mu held).
func (ps *wirePlans) make(md protoreflect.MessageDescriptor, made map[protoreflect.FullName]*wirePlan) *wirePlan {
	if p, ok := ps.plans.Load(md.FullName()); ok {
		return p.(*wirePlan)
	}
	if p, ok := made[md.FullName()]; ok {
		return p
	}
	p := &wirePlan{utf8: true} // until its fields say otherwise
	made[md.FullName()] = p    // before its fields: a message may hold itself
	holdsUTF8 := false
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		f := fieldPlan{kind: fieldUnsupported}
		switch fd.Kind() {
		case protoreflect.StringKind:
			f.kind = fieldBytes
			if enforceUTF8(fd) {
				f.kind = fieldUTF8
				holdsUTF8 = true
			}
		case protoreflect.BytesKind:
			f.kind = fieldBytes
		case protoreflect.MessageKind: // a map entry is a message too
			f = fieldPlan{kind: fieldMessage, sub: ps.make(fd.Message(), made)}
			holdsUTF8 = holdsUTF8 || f.sub.utf8
		case protoreflect.BoolKind, protoreflect.EnumKind,
			protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind,
			protoreflect.Sint32Kind, protoreflect.Sint64Kind:
			f.kind = fieldVarint
			if fd.IsList() {
				f.kind = fieldVarintList
			}
		}
		// Fixed-size numbers and groups stay unsupported: no message of
		// proto/spool has one, so protobuf-go decides rather than an
		// untested check here.
		if num := fd.Number(); num < maxDenseField {
			for len(p.fields) <= int(num) {
				p.fields = append(p.fields, fieldPlan{})
			}
			p.fields[num] = f
		} else {
			if p.sparse == nil {
				p.sparse = make(map[protowire.Number]fieldPlan)
			}
			p.sparse[num] = f
		}
	}
	p.utf8 = holdsUTF8
	return p
}

// enforceUTF8 is protobuf-go's rule (internal/strs.EnforceUTF8): proto3
// strings must be valid UTF-8, and those of editions whose features say so.
func enforceUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if fd, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return fd.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}

// wireValid reports whether b, the encoding of a message of plan p, has
// none of the faults protobuf-go rejects or reads otherwise than vtproto's
// generated code: every tag and value is well formed (field numbers below
// 2^29, varints of at most 64 bits, lengths within their message, groups
// that end with their own number), unknown fields' tags take the fewest
// bytes, every known field has its declared wire type (protobuf-go keeps
// one that does not as an unknown field; vtproto refuses it, or reads a map
// entry's as if it had), and every string protobuf-go checks is valid
// UTF-8. When it holds, protobuf-go and vtproto decode b to equal messages
// (FuzzCodecUnmarshal); when it does not, the codec lets protobuf-go
// decide. It walks the tags and skips over values by their lengths: only
// strings are read.
//
// written says b is what vtproto's code wrote: then only its strings need
// a look (protobuf-go refuses to marshal one that is not UTF-8, and a peer
// in another language may refuse to read it), and messages without any,
// such as a raft batch, are skipped.
func wireValid(b []byte, p *wirePlan, written bool) bool {
	if written && !p.utf8 {
		return true
	}
	for len(b) > 0 {
		// Most tags and lengths take one byte: read those here, the rest
		// with protowire.
		var num protowire.Number
		var typ protowire.Type
		tagSize := 1
		if c := b[0]; c < 0x80 {
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
			if num == 0 {
				return false
			}
		} else {
			num, typ, tagSize = protowire.ConsumeTag(b)
			if tagSize < 0 || num > protowire.MaxValidNumber {
				return false
			}
		}
		b = b[tagSize:]
		var v []byte // a length-delimited value
		if typ == protowire.BytesType {
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, b = b[1:1+b[0]], b[1+b[0]:]
			} else {
				var n int
				v, n = protowire.ConsumeBytes(b)
				if n < 0 {
					return false
				}
				b = b[n:]
			}
		} else {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
		f := p.field(num)
		switch f.kind {
		case fieldUnknown:
			if !written && tagSize != protowire.SizeTag(num) {
				// protobuf-go keeps an unknown field with its tag
				// re-encoded in the fewest bytes, vtproto as it came.
				return false
			}
		case fieldUTF8:
			if typ != protowire.BytesType || !utf8.Valid(v) {
				return false
			}
		case fieldBytes:
			if typ != protowire.BytesType {
				return false
			}
		case fieldMessage:
			if typ != protowire.BytesType || !wireValid(v, f.sub, written) {
				return false
			}
		case fieldVarint:
			if typ != protowire.VarintType {
				return false
			}
		case fieldVarintList:
			if typ == protowire.VarintType || written {
				continue
			}
			if typ != protowire.BytesType {
				return false
			}
			for len(v) > 0 { // packed
				_, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return false
				}
				v = v[n:]
			}
		default:
			return false
		}
	}
	return true
}
