package coord

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strconv"
)

// Checkpoints (docs/groups.md, "Checkpoints"): the offsets topic's log
// would grow with every heartbeat and commit, and a replica would replay
// all of it when it starts. So the coordinator's leader now and then writes
// its whole state into the log, split into Checkpoint commands on
// consecutive offsets right after the last record that state holds; from
// then on the log may start at the first of them. Whether a checkpoint is
// valid depends only on the log (the offsets its chunks take), so every
// replica decides it alike.

// Limits of checkpoints.
const (
	// CheckpointChunkBytes is the most state bytes one checkpoint record
	// carries (a record stays well under a log batch).
	CheckpointChunkBytes = 512 << 10
	// MaxCheckpointChunks is the most records of one checkpoint: a state of
	// MaxStateBytes.
	MaxCheckpointChunks = (MaxStateBytes + CheckpointChunkBytes - 1) / CheckpointChunkBytes
)

// Checkpoint is one chunk of a coordinator's state (GroupsCheckpoint).
type Checkpoint struct {
	// AsOf is the offset of the last record the state holds.
	AsOf int64
	// Chunk is this record's place, from 0, of Chunks.
	Chunk, Chunks uint32
	// Sum is the SHA-256 of the whole encoded state.
	Sum []byte
	// Data is this chunk's part of the encoded state.
	Data []byte
}

func (c *Checkpoint) validate() error {
	switch {
	case c.AsOf < 0:
		return invalid("checkpoint as_of", strconv.FormatInt(c.AsOf, 10), "an offset (0 or more)")
	case c.Chunks == 0 || c.Chunks > MaxCheckpointChunks || c.Chunk >= c.Chunks:
		return invalid("checkpoint chunk", fmt.Sprintf("%d of %d", c.Chunk, c.Chunks), fmt.Sprintf("a chunk below a count of 1 to %d (MaxCheckpointChunks)", MaxCheckpointChunks))
	case len(c.Sum) != sha256.Size:
		return invalid("checkpoint sum", fmt.Sprintf("%d bytes", len(c.Sum)), "a SHA-256 (32 bytes)")
	case len(c.Data) > CheckpointChunkBytes:
		return invalid("checkpoint data", fmt.Sprintf("%d bytes", len(c.Data)), fmt.Sprintf("at most %d bytes (CheckpointChunkBytes)", CheckpointChunkBytes))
	}
	return nil
}

// CheckpointOf returns the commands of a checkpoint of s, the state as of
// the record at offset asOf: to be proposed in order, on the offsets right
// after asOf, with nothing in between. AtMs is left for the proposer.
func CheckpointOf(s *State, asOf int64) ([]Command, error) {
	b, err := EncodeState(s)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	n := max(1, (len(b)+CheckpointChunkBytes-1)/CheckpointChunkBytes)
	cmds := make([]Command, n)
	for i := range cmds {
		lo, hi := i*CheckpointChunkBytes, min(len(b), (i+1)*CheckpointChunkBytes)
		cmds[i] = Command{Checkpoint: &Checkpoint{AsOf: asOf, Chunk: uint32(i), Chunks: uint32(n), Sum: sum[:], Data: b[lo:hi]}}
	}
	return cmds, nil
}

// Sum returns the SHA-256 of s's encoding: what a checkpoint of s carries.
func Sum(s *State) ([]byte, error) {
	b, err := EncodeState(s)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// CheckpointRun follows the checkpoint records of a log in offset order
// and says when one is complete and valid. It keeps the chunks' data only
// when asked to (Keep), to rebuild a state from it. The zero value follows
// nothing yet. Pure: offsets and commands in, no I/O.
type CheckpointRun struct {
	// Keep makes Add keep the chunks' data for State.
	Keep bool

	start int64 // offset of chunk 0 of the run followed (-1: none)
	cur   *Checkpoint
	next  uint32 // the chunk expected next
	data  []byte
	valid bool
}

// Add gives the run the record at offset off (cmd its command; any command
// other than a Checkpoint breaks a run). It returns true when off completes
// a valid checkpoint: chunks 0 to Chunks-1 of one checkpoint on offsets
// AsOf+1 to AsOf+Chunks.
func (r *CheckpointRun) Add(off int64, cmd Command) bool {
	c := cmd.Checkpoint
	r.valid = false
	switch {
	case c == nil:
		r.reset()
		return false
	case c.Chunk == 0:
		r.reset()
		if c.AsOf != off-1 {
			return false // something landed between the state and its chunks
		}
		r.start, r.cur, r.next = off, c, 0
	case r.cur == nil || off != r.start+int64(c.Chunk) || c.Chunk != r.next ||
		c.AsOf != r.cur.AsOf || c.Chunks != r.cur.Chunks || !bytes.Equal(c.Sum, r.cur.Sum):
		r.reset()
		return false
	}
	if r.Keep {
		r.data = append(r.data, c.Data...)
	}
	r.next++
	if r.next < r.cur.Chunks {
		return false
	}
	r.valid = true
	return true
}

func (r *CheckpointRun) reset() {
	r.start, r.cur, r.next, r.data, r.valid = -1, nil, 0, nil, false
}

// Start is the offset of the first chunk of the checkpoint Add last
// completed: where the log may start.
func (r *CheckpointRun) Start() int64 { return r.start }

// Sum is the SHA-256 the checkpoint Add last completed carries.
func (r *CheckpointRun) Sum() []byte {
	if r.cur == nil {
		return nil
	}
	return r.cur.Sum
}

// State decodes the state of the checkpoint Add last completed (Keep must
// be set), checked against its sum and every invariant of a state.
func (r *CheckpointRun) State() (*State, error) {
	if !r.valid || !r.Keep {
		return nil, fmt.Errorf("%w checkpoint: no complete checkpoint kept", ErrMalformed)
	}
	if sum := sha256.Sum256(r.data); !bytes.Equal(sum[:], r.cur.Sum) {
		return nil, fmt.Errorf("%w checkpoint at offset %d: its chunks' SHA-256 is %x, it says %x", ErrMalformed, r.start, sum, r.cur.Sum)
	}
	return DecodeState(r.data)
}
