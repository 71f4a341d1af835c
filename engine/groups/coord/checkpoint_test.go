package coord

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// bigState is a state whose encoding takes several checkpoint chunks:
// committed positions with many finished offsets, on many partitions.
func bigState(t testing.TB) *State {
	f := newFlow(t)
	done := make([]int64, MaxDonePerPosition)
	for i := range done {
		done[i] = 1<<40 + 1 + int64(2*i)
	}
	for g := range 4 {
		f.group = fmt.Sprintf("g%d", g)
		f.join("m1", 1)
		f.settle()
		a, _ := f.s.Assignment(f.group, "m1")
		for _, tp := range a.Owned {
			f.apply(Command{Commit: &Commit{Member: "m1", Generation: a.Generation, TopicPartition: tp, Position: Position{Next: 1 << 40, Done: done}}})
		}
	}
	return f.s
}

// replay feeds cmds, through the codec, to a run at consecutive offsets from
// first, and returns at which of them it completed.
func replay(t testing.TB, run *CheckpointRun, first int64, cmds []Command) []int64 {
	t.Helper()
	var done []int64
	for i, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("encode %d: %v", i, err)
		}
		d, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode %d: %v", i, err)
		}
		if r := NewState().Apply(d); r.Err != nil {
			t.Fatalf("command %d refused: %v", i, r.Err)
		}
		if run.Add(first+int64(i), d) {
			done = append(done, first+int64(i))
		}
	}
	return done
}

// TestCheckpointRoundTrip: a state split into checkpoint chunks, proposed
// right after the offset it is as of, comes back whole from the chunks
// (several of them for a big state), and carries the sum of the state.
func TestCheckpointRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *State
	}{{"empty", NewState()}, {"seed", seedState(t)}, {"big", bigState(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, err := CheckpointOf(tc.s, 99)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "big" && len(cmds) < 2 {
				t.Fatalf("a big state took %d chunk(s); the test wants several", len(cmds))
			}
			run := &CheckpointRun{Keep: true}
			if done := replay(t, run, 100, cmds); len(done) != 1 || done[0] != 100+int64(len(cmds))-1 {
				t.Fatalf("completed at %v, want once at the last chunk (%d)", done, 100+len(cmds)-1)
			}
			if run.Start() != 100 {
				t.Fatalf("start %d, want 100", run.Start())
			}
			got, err := run.State()
			if err != nil {
				t.Fatal(err)
			}
			want, sum := mustEncode(t, tc.s), run.Sum()
			if !bytes.Equal(mustEncode(t, got), want) {
				t.Fatal("the state rebuilt from the checkpoint differs from the one checkpointed")
			}
			if s2, _ := Sum(tc.s); !bytes.Equal(s2, sum) {
				t.Fatalf("sum %x, the state's is %x", sum, s2)
			}
		})
	}
}

// TestCheckpointRunModel: whatever the log holds around checkpoint chunks —
// other commands in between, chunks missing, repeated or out of order, two
// checkpoints interleaved, a checkpoint not right after its as-of offset —
// a run completes exactly where the model says: at the last of Chunks
// records on consecutive offsets that are chunks 0 to Chunks-1 of one
// checkpoint whose first lies right after AsOf. A run keeping the data
// rebuilds the state checkpointed.
func TestCheckpointRunModel(t *testing.T) {
	states := []*State{NewState(), seedState(t)}
	rapid.Check(t, func(t *rapid.T) {
		type rec struct {
			off int64
			cmd Command
		}
		var log []rec
		off := rapid.Int64Range(0, 5).Draw(t, "first")
		for range rapid.IntRange(1, 30).Draw(t, "records") {
			switch rapid.IntRange(0, 3).Draw(t, "kind") {
			case 0:
				log = append(log, rec{off, Command{Group: "g", AtMs: 1, Heartbeat: &Heartbeat{Member: "m", Session: "s"}}})
			default:
				s := states[rapid.IntRange(0, 1).Draw(t, "state")]
				asOf := off - 1 + rapid.Int64Range(-1, 1).Draw(t, "as_of skew")
				cmds, err := CheckpointOf(s, max(asOf, 0))
				if err != nil {
					t.Fatal(err)
				}
				// Split small states into several chunks by hand, as a big
				// state would be.
				if n := rapid.IntRange(1, 3).Draw(t, "split"); n > 1 && len(cmds) == 1 {
					data := cmds[0].Checkpoint.Data
					cmds = cmds[:0]
					for i := range n {
						lo, hi := i*len(data)/n, (i+1)*len(data)/n
						k := *cmdsChunk(asOf, data[lo:hi], i, n, mustSum(t, s))
						cmds = append(cmds, Command{Checkpoint: &k})
					}
				}
				for _, c := range cmds {
					switch rapid.IntRange(0, 9).Draw(t, "damage") {
					case 0: // lost
						continue
					case 1: // repeated
						log = append(log, rec{off, c})
						off++
					}
					log = append(log, rec{off, c})
					off++
				}
				continue
			}
			off++
		}
		run := &CheckpointRun{Keep: true}
		for i, r := range log {
			got := run.Add(r.off, r.cmd)
			// The model: the record completes a checkpoint if it is chunk
			// n-1 and the n-1 records before it are chunks 0..n-2 of the same
			// checkpoint, at consecutive offsets starting right after AsOf.
			want := false
			if k := r.cmd.Checkpoint; k != nil && k.Chunk == k.Chunks-1 && i+1 >= int(k.Chunks) {
				first := i + 1 - int(k.Chunks)
				want = log[first].off == k.AsOf+1
				for j := first; j <= i && want; j++ {
					c := log[j].cmd.Checkpoint
					want = c != nil && c.Chunk == uint32(j-first) && c.Chunks == k.Chunks && c.AsOf == k.AsOf &&
						bytes.Equal(c.Sum, k.Sum) && log[j].off == log[first].off+int64(j-first)
				}
			}
			if got != want {
				t.Fatalf("record %d (offset %d, %s): completed %v, the model says %v", i, r.off, describeCk(r.cmd), got, want)
			}
			if got {
				s, err := run.State()
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if sum, _ := Sum(s); !bytes.Equal(sum, r.cmd.Checkpoint.Sum) {
					t.Fatalf("record %d: rebuilt a state other than the one checkpointed", i)
				}
			}
		}
	})
}

func cmdsChunk(asOf int64, data []byte, i, n int, sum []byte) *Checkpoint {
	return &Checkpoint{AsOf: max(asOf, 0), Chunk: uint32(i), Chunks: uint32(n), Sum: sum, Data: data}
}

func mustSum(t rapid.TB, s *State) []byte {
	sum, err := Sum(s)
	if err != nil {
		t.Fatalf("sum: %v", err)
	}
	return sum
}

func describeCk(c Command) string {
	if k := c.Checkpoint; k != nil {
		return fmt.Sprintf("chunk %d of %d as of %d", k.Chunk, k.Chunks, k.AsOf)
	}
	return "not a checkpoint"
}

// TestCheckpointRefused: chunks with bad values are refused by Apply like
// any bad command, and a checkpoint names no group.
func TestCheckpointRefused(t *testing.T) {
	sum := make([]byte, 32)
	for _, c := range []Command{
		{Group: "g", Checkpoint: &Checkpoint{Chunks: 1, Sum: sum}},
		{Checkpoint: &Checkpoint{Chunks: 0, Sum: sum}},
		{Checkpoint: &Checkpoint{Chunk: 2, Chunks: 2, Sum: sum}},
		{Checkpoint: &Checkpoint{Chunks: MaxCheckpointChunks + 1, Sum: sum}},
		{Checkpoint: &Checkpoint{AsOf: -1, Chunks: 1, Sum: sum}},
		{Checkpoint: &Checkpoint{Chunks: 1, Sum: sum[:5]}},
		{Checkpoint: &Checkpoint{Chunks: 1, Sum: sum, Data: make([]byte, CheckpointChunkBytes+1)}},
	} {
		if r := NewState().Apply(c); r.Err == nil {
			t.Errorf("%s (group %q) accepted", describeCk(c), c.Group)
		}
	}
	if r := NewState().Apply(Command{Checkpoint: &Checkpoint{Chunks: 1, Sum: sum}}); r.Err != nil {
		t.Errorf("a good chunk refused: %v", r.Err)
	}
}
