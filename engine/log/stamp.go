package log

import (
	"encoding/binary"
	"hash/crc32"
)

// Offsets of a record payload (EncodeRecords: a frame without its
// placement prefix).
const (
	payloadBodyCRC = offBodyCRC - PlacementSize
	payloadBody    = offBody - PlacementSize
	payloadFirstTs = offFirstTs - PlacementSize
	payloadMaxTs   = offMaxTs - PlacementSize
)

// PayloadMaxTimestamp returns the largest record time of a record payload
// (EncodeRecords), or ok false if data is not one.
func PayloadMaxTimestamp(data []byte) (ts int64, ok bool) {
	if PayloadType(data) != EntryData {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(data[payloadMaxTs:])), true
}

// StampRecords gives the records of a record payload (EncodeRecords) the
// times a partition's leader assigns when it proposes them, so that publish
// times never decrease along a partition's log: the batch's first time
// becomes its own, kept if it lies in [floor, now], else moved into that
// range (to floor if the batch is older than what the log holds — a batch
// encoded by a sidecar that waited for a leader, or by one whose clock is
// behind —, to now if it comes from a clock ahead of the leader's, but
// never below floor). All records of the batch move by the same amount.
// floor is the largest record time the leader's log holds; now its clock
// (unix ms).
//
// It returns the payload — data itself when nothing moved, else a stamped
// copy (data may still be read by its owner) — and the batch's largest
// record time after stamping, the floor for the next batch. A payload that
// is not a record batch is returned as it is, with floor.
func StampRecords(data []byte, floor, now int64) ([]byte, int64) {
	if PayloadType(data) != EntryData {
		return data, floor
	}
	le := binary.LittleEndian
	first := int64(le.Uint64(data[payloadFirstTs:]))
	last := int64(le.Uint64(data[payloadMaxTs:]))
	at := max(floor, min(first, now))
	if at == first {
		return data, max(floor, last)
	}
	shift := at - first
	out := make([]byte, len(data))
	copy(out, data)
	le.PutUint64(out[payloadFirstTs:], uint64(at))
	le.PutUint64(out[payloadMaxTs:], uint64(last+shift))
	le.PutUint32(out[payloadBodyCRC:], crc32.Checksum(out[payloadBody:], castagnoli))
	return out, max(floor, last+shift)
}

// MaxTimestamp returns the largest record time of the newest segment that
// holds records, or 0 if the log holds none. With times assigned by
// StampRecords that is the largest of the log.
func (p *Partition) MaxTimestamp() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i := len(p.segs) - 1; i >= 0; i-- {
		if ts := p.segs[i].maxTs; ts != noTimestamp {
			return ts
		}
	}
	return 0
}
