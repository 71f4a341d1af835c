package jetstream

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/spoolmq/spool/engine"
)

// recordVersion is the first byte of every message payload Spool writes.
const recordVersion = 1

// encodeRecord is a record as one NATS message payload: version byte,
// then uvarint-length-prefixed id, key, header count and headers (name,
// value), then the value to the end. Headers go in the payload, not in
// NATS headers, so that any bytes and any order round-trip exactly.
func encodeRecord(r *engine.Record) []byte {
	n := 1 + 3*binary.MaxVarintLen64 + len(r.ID) + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	b = append(b, recordVersion)
	b = binary.AppendUvarint(b, uint64(len(r.ID)))
	b = append(b, r.ID...)
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return append(b, r.Value...)
}

var errBadRecord = errors.New("jetstream: a message that Spool did not write (or a damaged one)")

// decodeRecord fills r from a payload; r's slices point into b.
func decodeRecord(b []byte, r *engine.Record) error {
	if len(b) == 0 || b[0] != recordVersion {
		return fmt.Errorf("%w: first byte %v, want version %d", errBadRecord, b[:min(len(b), 1)], recordVersion)
	}
	b = b[1:]
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	var ok bool
	if r.ID, ok = next(); !ok {
		return fmt.Errorf("%w: truncated id", errBadRecord)
	}
	if r.Key, ok = next(); !ok {
		return fmt.Errorf("%w: truncated key", errBadRecord)
	}
	nh, k := binary.Uvarint(b)
	if k <= 0 || nh > uint64(len(b)) {
		return fmt.Errorf("%w: bad header count", errBadRecord)
	}
	b = b[k:]
	r.Headers = r.Headers[:0]
	for range nh {
		var h engine.Header
		name, ok := next()
		if !ok {
			return fmt.Errorf("%w: truncated header name", errBadRecord)
		}
		h.Key = string(name)
		if h.Value, ok = next(); !ok {
			return fmt.Errorf("%w: truncated header value", errBadRecord)
		}
		r.Headers = append(r.Headers, h)
	}
	r.Value = b
	return nil
}
