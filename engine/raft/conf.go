package raft

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
)

// A ConfState is encoded as:
//
//	auto_leave  1 byte, 0 or 1
//	then four id lists, in order voters, learners, voters_outgoing, learners_next:
//	  count     2 bytes, little-endian
//	  ids       count × 8 bytes, little-endian
//
// The smallest encoding (no ids) is 9 bytes.

func confStateIDs(cs raftpb.ConfState) int {
	return len(cs.Voters) + len(cs.Learners) + len(cs.VotersOutgoing) + len(cs.LearnersNext)
}

func confStateBytes(cs raftpb.ConfState) int { return 1 + 4*2 + 8*confStateIDs(cs) }

// appendConfState appends the encoding of cs to p; the caller has checked
// confStateIDs(cs) <= MaxConfStateIDs.
func appendConfState(p []byte, cs raftpb.ConfState) []byte {
	if cs.AutoLeave {
		p = append(p, 1)
	} else {
		p = append(p, 0)
	}
	for _, l := range [][]uint64{cs.Voters, cs.Learners, cs.VotersOutgoing, cs.LearnersNext} {
		p = binary.LittleEndian.AppendUint16(p, uint16(len(l)))
		for _, id := range l {
			p = binary.LittleEndian.AppendUint64(p, id)
		}
	}
	return p
}

// readConfState decodes a ConfState at the start of p and returns the bytes
// after it. It checks every length against p and MaxConfStateIDs.
func readConfState(p []byte) (cs raftpb.ConfState, rest []byte, err error) {
	if len(p) < 1 {
		return cs, nil, fmt.Errorf("ConfState: no auto-leave byte")
	}
	switch p[0] {
	case 0:
	case 1:
		cs.AutoLeave = true
	default:
		return cs, nil, fmt.Errorf("ConfState: auto-leave byte %d, want 0 or 1", p[0])
	}
	p = p[1:]
	ids := 0
	for i, l := range []*[]uint64{&cs.Voters, &cs.Learners, &cs.VotersOutgoing, &cs.LearnersNext} {
		if len(p) < 2 {
			return cs, nil, fmt.Errorf("ConfState: ends before id list %d", i)
		}
		c := int(binary.LittleEndian.Uint16(p))
		p = p[2:]
		if ids += c; ids > MaxConfStateIDs {
			return cs, nil, fmt.Errorf("ConfState: more than %d node ids", MaxConfStateIDs)
		}
		if len(p) < c*8 {
			return cs, nil, fmt.Errorf("ConfState: id list %d of %d ids runs past the end", i, c)
		}
		if c > 0 {
			*l = make([]uint64, c)
			for j := range c {
				(*l)[j] = binary.LittleEndian.Uint64(p[8*j:])
			}
			p = p[8*c:]
		}
	}
	return cs, p, nil
}
