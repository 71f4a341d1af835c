package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// twin builds a network of n endpoints that know each other.
func twin(t *testing.T, seed uint64, n int) (*Network, []*Endpoint, []*recorder) {
	t.Helper()
	net := NewNetwork(seed)
	eps := make([]*Endpoint, n)
	hs := make([]*recorder, n)
	for i := range eps {
		hs[i] = newRecorder()
		eps[i] = net.Endpoint(uint64(i+1), hs[i])
	}
	for i, e := range eps {
		for j := range eps {
			if i != j {
				if err := e.AddPeer(uint64(j+1), ""); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return net, eps, hs
}

// sendN sends n MsgApps from 1 to 2, index i in the i-th.
func sendN(e *Endpoint, n int) {
	for i := range n {
		e.Send([]Message{app(1, 1, 2, uint64(i), "")})
	}
}

func indexes(r *recorder) []uint64 {
	var out []uint64
	for _, m := range r.messages() {
		out = append(out, m.Msg.Index)
	}
	return out
}

func TestTwinDeliversInOrderWithoutFaults(t *testing.T) {
	net, eps, hs := twin(t, 1, 2)
	sendN(eps[0], 100)
	if got := len(hs[1].messages()); got != 0 {
		t.Fatalf("delivered %d before Advance", got)
	}
	if n := net.Advance(0); n != 100 {
		t.Fatalf("Advance delivered %d", n)
	}
	if !slices.IsSorted(indexes(hs[1])) {
		t.Fatal("out of order")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := eps[0].Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTwinDrops(t *testing.T) {
	net, eps, hs := twin(t, 2, 2)
	net.SetFaults(Faults{Drop: 0.3})
	sendN(eps[0], 1000)
	net.Flush()
	got, dropped := len(hs[1].messages()), eps[0].Stats().FaultDropped
	if got+int(dropped) != 1000 || dropped < 200 || dropped > 400 {
		t.Fatalf("delivered %d, dropped %d of 1000 at 30%%", got, dropped)
	}
}

func TestTwinDuplicates(t *testing.T) {
	net, eps, hs := twin(t, 3, 2)
	net.SetFaults(Faults{Duplicate: 0.5})
	sendN(eps[0], 1000)
	net.Flush()
	dups := eps[0].Stats().FaultDuplicated
	count := map[uint64]int{}
	for _, i := range indexes(hs[1]) {
		count[i]++
	}
	if len(count) != 1000 || len(hs[1].messages()) != 1000+int(dups) || dups < 400 || dups > 600 {
		t.Fatalf("%d distinct, %d delivered, %d duplicated", len(count), len(hs[1].messages()), dups)
	}
}

func TestTwinDelaysAndReorders(t *testing.T) {
	net, eps, hs := twin(t, 4, 2)
	net.SetFaults(Faults{Delay: 50 * time.Millisecond})
	sendN(eps[0], 10)
	if n := net.Advance(49 * time.Millisecond); n != 0 {
		t.Fatalf("delivered %d before the delay", n)
	}
	if n := net.Advance(time.Millisecond); n != 10 || !slices.IsSorted(indexes(hs[1])) {
		t.Fatalf("delivered %d at the delay, in order: %v", n, slices.IsSorted(indexes(hs[1])))
	}
	net.SetFaults(Faults{Delay: time.Millisecond, Jitter: 20 * time.Millisecond})
	sendN(eps[0], 200)
	net.Flush()
	got := indexes(hs[1])[10:]
	if len(got) != 200 || slices.IsSorted(got) {
		t.Fatalf("with jitter: %d delivered, sorted %v (want reordered)", len(got), slices.IsSorted(got))
	}
}

func TestTwinPartitionsAndHeals(t *testing.T) {
	net, eps, hs := twin(t, 5, 3)
	// Both directions between {1} and {2}; 3 still reaches both.
	net.Partition([]uint64{1}, []uint64{2})
	eps[0].Send([]Message{app(1, 1, 2, 1, ""), app(1, 1, 3, 1, "")})
	eps[1].Send([]Message{app(1, 2, 1, 1, ""), app(1, 2, 3, 1, "")})
	eps[2].Send([]Message{app(1, 3, 1, 1, ""), app(1, 3, 2, 1, "")})
	net.Flush()
	if len(hs[0].messages()) != 1 || len(hs[1].messages()) != 1 || len(hs[2].messages()) != 2 {
		t.Fatalf("partition: %d %d %d", len(hs[0].messages()), len(hs[1].messages()), len(hs[2].messages()))
	}
	if hs[0].messages()[0].Msg.From != 3 || hs[1].messages()[0].Msg.From != 3 {
		t.Fatal("a message crossed the partition")
	}
	// One direction: 1 → 2 cut, 2 → 1 open.
	net.Heal()
	net.Cut(1, 2)
	eps[0].Send([]Message{app(1, 1, 2, 2, "")})
	eps[1].Send([]Message{app(1, 2, 1, 2, "")})
	net.Flush()
	if len(hs[0].messages()) != 2 || len(hs[1].messages()) != 1 {
		t.Fatalf("one-way cut: %d %d", len(hs[0].messages()), len(hs[1].messages()))
	}
	// What is in flight when a link is cut is lost; after healing, delivery resumes.
	net.HealLink(1, 2)
	net.SetFaults(Faults{Delay: 10 * time.Millisecond})
	eps[0].Send([]Message{app(1, 1, 2, 3, "")})
	net.Cut(1, 2)
	net.Flush()
	net.Heal()
	eps[0].Send([]Message{app(1, 1, 2, 4, "")})
	net.Flush()
	if got := indexes(hs[1]); !slices.Equal(got, []uint64{1, 4}) {
		t.Fatalf("after heal: %v", got)
	}
	if c := eps[0].Stats().FaultCut; c != 3 {
		t.Fatalf("cut count %d, want 3", c)
	}
}

// The same seed and the same calls give the same deliveries; another seed
// gives others.
func TestTwinReplays(t *testing.T) {
	run := func(seed uint64) string {
		net, eps, hs := twin(t, seed, 3)
		net.SetFaults(Faults{Drop: 0.1, Duplicate: 0.1, Delay: time.Millisecond, Jitter: 5 * time.Millisecond})
		for i := range 300 {
			from := eps[i%3]
			to := uint64((i+1)%3 + 1)
			from.Send([]Message{app(uint64(i%7), from.id, to, uint64(i), "")})
			if i%10 == 0 {
				net.Advance(time.Millisecond)
			}
			if i == 150 {
				net.Partition([]uint64{1}, []uint64{2, 3})
			}
		}
		net.Flush()
		var out string
		for _, h := range hs {
			out += fmt.Sprint(indexes(h), ";")
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	if a != b {
		t.Fatal("same seed, different deliveries")
	}
	if a == c {
		t.Fatal("different seeds, same deliveries")
	}
}

// Snapshots are delivered with their data and reported to the sender; one
// lost to a cut is reported failed.
func TestTwinSnapshots(t *testing.T) {
	net, eps, hs := twin(t, 6, 3)
	snap := func(to uint64) Message {
		return Message{Group: 4, Msg: raftpb.Message{Type: raftpb.MsgSnap, From: 1, To: to, Snapshot: &raftpb.Snapshot{Data: []byte("state")}}}
	}
	net.Cut(1, 3)
	eps[0].Send([]Message{snap(2), snap(3)})
	net.Flush()
	hs[0].mu.Lock()
	done := append([]snapOutcome(nil), hs[0].snapDone...)
	hs[0].mu.Unlock()
	if len(done) != 2 || done[0].peer != 2 || done[0].err != nil || done[1].peer != 3 || !errors.Is(done[1].err, ErrCut) {
		t.Fatalf("outcomes %+v", done)
	}
	if len(hs[1].snaps) != 1 || string(hs[1].snaps[0].Msg.Snapshot.Data) != "state" {
		t.Fatalf("received %+v", hs[1].snaps)
	}
}

// A restarted node (a new handler for the same id) gets what was in flight
// to it; a removed one gets nothing; messages are copies.
func TestTwinRestartRemoveAndCopies(t *testing.T) {
	net, eps, hs := twin(t, 7, 2)
	m := app(1, 1, 2, 1, "abc")
	eps[0].Send([]Message{m})
	m.Msg.Entries[0].Data[0] = 'X' // the sender reuses its buffer
	h2 := newRecorder()
	net.Endpoint(2, h2)
	net.Flush()
	if len(hs[1].messages()) != 0 || len(h2.messages()) != 1 || string(h2.messages()[0].Msg.Entries[0].Data) != "abc" {
		t.Fatalf("restart: old %d, new %v", len(hs[1].messages()), h2.messages())
	}
	net.Remove(2)
	eps[0].Send([]Message{app(1, 1, 2, 2, "")})
	net.Flush()
	if len(h2.messages()) != 1 {
		t.Fatal("a removed node got a message")
	}
	eps[0].Send([]Message{app(1, 1, 9, 2, "")})
	if eps[0].Stats().DroppedNoPeer != 1 {
		t.Fatal("send to a non-peer not counted")
	}
}
