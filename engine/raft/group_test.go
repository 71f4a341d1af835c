package raft

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"pgregory.net/rapid"

	slog "github.com/spoolmq/spool/engine/log"
)

type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// hnode is one node of the in-process harness: an in-memory EntryLog (all
// of it durable: the harness writes and "fsyncs" an Append in one step), a
// real StateStore on a MemFS, and the work queues of its Group.
type hnode struct {
	id      uint64
	fs      *slog.MemFS
	store   *StateStore
	log     *memLog
	g       *Group
	up      bool
	appends []Append
	applies []Apply
	hs      raftpb.HardState // last HardState saved
	conf    raftpb.ConfState
	applied uint64
}

// harness wires groups together by passing messages directly. Every
// entry any node applied or holds at or below its commit index goes into
// committed, which must never hold two different entries at one index.
type harness struct {
	t             tb
	electionTicks int // 0: the default
	nodes         []*hnode
	net           []raftpb.Message
	committed     map[uint64]raftpb.Entry
}

var voters3 = raftpb.ConfState{Voters: []uint64{1, 2, 3}}

func newHarness(t tb, n, electionTicks int) *harness {
	h := &harness{t: t, committed: map[uint64]raftpb.Entry{}, electionTicks: electionTicks}
	for i := 1; i <= n; i++ {
		nd := &hnode{id: uint64(i), fs: slog.NewMemFS(), log: newMemLog()}
		s, _, err := OpenStateStore(nd.fs, testDir)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if err := s.Save(State{ConfState: voters3}); err != nil { // bootstrap: the initial voters
			t.Fatalf("node %d: %v", i, err)
		}
		h.nodes = append(h.nodes, nd)
		h.start(nd)
	}
	return h
}

// start opens the node from what is durable: the state file and the log.
func (h *harness) start(nd *hnode) {
	h.t.Helper()
	s, st, err := OpenStateStore(nd.fs, testDir)
	if err != nil {
		h.t.Fatalf("node %d: open state: %v", nd.id, err)
	}
	storage, err := NewStorage(nd.log, st, SnapshotMeta{})
	if err != nil {
		h.t.Fatalf("node %d: %v", nd.id, err)
	}
	g, err := NewGroup(GroupConfig{ID: nd.id, Storage: storage, ElectionTicks: h.electionTicks})
	if err != nil {
		h.t.Fatalf("node %d: %v", nd.id, err)
	}
	nd.store, nd.g, nd.up = s, g, true
	nd.hs, nd.conf, nd.applied = st.HardState, st.ConfState, st.Applied
	nd.appends, nd.applies = nil, nil
}

// crash stops the node: work not done is lost, and so is every byte not
// fsynced (here: none of the log; the state file's unsynced writes).
func (h *harness) crash(nd *hnode) {
	nd.fs.Crash()
	nd.up, nd.g, nd.store, nd.appends, nd.applies = false, nil, nil, nil, nil
}

func (h *harness) ready(nd *hnode) {
	if !nd.up || !nd.g.HasReady() {
		return
	}
	w := nd.g.Ready()
	h.net = append(h.net, w.Send...)
	nd.appends = append(nd.appends, w.Appends...)
	nd.applies = append(nd.applies, w.Applies...)
}

func (h *harness) doAppend(nd *hnode) {
	h.t.Helper()
	if !nd.up || len(nd.appends) == 0 {
		return
	}
	a := nd.appends[0]
	nd.appends = nd.appends[1:]
	if a.Snapshot != nil {
		h.t.Fatalf("node %d: unexpected snapshot %+v", nd.id, a.Snapshot.Metadata)
	}
	// Entries committed are never replaced.
	if len(a.Entries) > 0 {
		for i := a.Entries[0].Index; i <= nd.hs.Commit; i++ {
			old, ok := nd.log.entry(i)
			if e := a.Entries[i-a.Entries[0].Index]; ok && (old.Term != e.Term || !bytes.Equal(old.Data, e.Data)) {
				h.t.Fatalf("node %d: append replaces committed entry %d (commit %d)", nd.id, i, nd.hs.Commit)
			}
		}
	}
	if err := nd.log.append(a.Entries); err != nil { // entries first, then the state
		h.t.Fatalf("node %d: %v", nd.id, err)
	}
	if !etcdraft.IsEmptyHardState(a.HardState) {
		if a.HardState.Term < nd.hs.Term || (a.HardState.Term == nd.hs.Term && nd.hs.Vote != 0 && a.HardState.Vote != nd.hs.Vote) {
			h.t.Fatalf("node %d: HardState %+v after %+v: term went back or vote changed within a term", nd.id, a.HardState, nd.hs)
		}
		nd.hs = a.HardState
		if err := nd.store.Save(State{HardState: nd.hs, ConfState: nd.conf, Applied: nd.applied}); err != nil {
			h.t.Fatalf("node %d: %v", nd.id, err)
		}
	}
	out, err := nd.g.AppendDone(a)
	if err != nil {
		h.t.Fatalf("node %d: %v", nd.id, err)
	}
	h.net = append(h.net, out...)
}

func (h *harness) doApply(nd *hnode) {
	h.t.Helper()
	if !nd.up || len(nd.applies) == 0 {
		return
	}
	a := nd.applies[0]
	nd.applies = nd.applies[1:]
	for _, e := range a.Entries {
		h.sawCommitted(nd, e)
		if _, ok := nd.log.entry(e.Index); !ok {
			h.t.Fatalf("node %d: entry %d applied before it is in the local log", nd.id, e.Index)
		}
	}
	res, out, err := nd.g.ApplyDone(a)
	if err != nil {
		h.t.Fatalf("node %d: %v", nd.id, err)
	}
	nd.applied = res.Index
	if res.ConfState != nil {
		nd.conf = *res.ConfState
	}
	if err := nd.store.Save(State{HardState: nd.hs, ConfState: nd.conf, Applied: nd.applied}); err != nil {
		h.t.Fatalf("node %d: %v", nd.id, err)
	}
	h.net = append(h.net, out...)
}

func (h *harness) sawCommitted(nd *hnode, e raftpb.Entry) {
	h.t.Helper()
	if old, ok := h.committed[e.Index]; ok {
		if old.Term != e.Term || old.Type != e.Type || !bytes.Equal(old.Data, e.Data) {
			h.t.Fatalf("node %d: committed entry %d is term %d %q, another node committed term %d %q", nd.id, e.Index, e.Term, e.Data, old.Term, old.Data)
		}
		return
	}
	h.committed[e.Index] = e
}

func (h *harness) deliver(i int) {
	m := h.net[i]
	h.net = slices.Delete(h.net, i, i+1)
	if m.To == 0 || int(m.To) > len(h.nodes) {
		h.t.Fatalf("message to unknown node: %+v", m)
	}
	nd := h.nodes[m.To-1]
	if !nd.up {
		return
	}
	_ = nd.g.Step(m) // raft refuses some messages (e.g. from a removed peer); that is not an error here
}

// settle does all the work there is, delivering messages in order.
func (h *harness) settle() {
	h.t.Helper()
	for range 10000 {
		busy := len(h.net) > 0
		for _, nd := range h.nodes {
			if nd.up && (nd.g.HasReady() || len(nd.appends) > 0 || len(nd.applies) > 0) {
				busy = true
			}
			h.ready(nd)
			for nd.up && len(nd.appends) > 0 {
				h.doAppend(nd)
			}
			for nd.up && len(nd.applies) > 0 {
				h.doApply(nd)
			}
		}
		for len(h.net) > 0 {
			h.deliver(0)
		}
		if !busy {
			return
		}
	}
	h.t.Fatalf("the cluster did not settle")
}

func (h *harness) tickAll() {
	for _, nd := range h.nodes {
		if nd.up {
			nd.g.Tick()
		}
	}
}

// leader ticks and settles until one up node leads, and returns it.
func (h *harness) leader() *hnode {
	h.t.Helper()
	for range 50 * DefaultElectionTicks {
		for _, nd := range h.nodes {
			if nd.up && nd.g.Status().RaftState == etcdraft.StateLeader {
				return nd
			}
		}
		h.tickAll()
		h.settle()
	}
	h.t.Fatalf("no leader elected")
	return nil
}

// checkLogs: on every node, the log up to its commit index agrees with
// every entry seen committed anywhere.
func (h *harness) checkLogs() {
	h.t.Helper()
	for _, nd := range h.nodes {
		// A follower's commit index may cover entries raft holds but has not
		// had written yet (async storage writes): its durable log can still
		// hold, at such an index, an older entry that the pending append
		// replaces. Read a node's log only when it has nothing pending, so
		// that the log is raft's view.
		if !nd.up || len(nd.appends) > 0 || nd.g.HasReady() {
			continue
		}
		c := min(nd.g.Status().Commit, nd.log.LastIndex())
		for i := nd.log.FirstIndex(); i <= c; i++ {
			e, _ := nd.log.entry(i)
			h.sawCommitted(nd, e)
		}
	}
}

// proposals returns the data of the normal, non-empty entries of nd's log
// up to its commit index.
func (h *harness) proposals(nd *hnode) []string {
	var out []string
	for i := uint64(1); i <= nd.g.Status().Commit; i++ {
		if e, ok := nd.log.entry(i); ok && e.Type == raftpb.EntryNormal && len(e.Data) > 0 {
			out = append(out, string(e.Data))
		}
	}
	return out
}

func (h *harness) describe() string {
	var b bytes.Buffer
	for _, nd := range h.nodes {
		st := nd.g.Status()
		fmt.Fprintf(&b, "[%d %s term %d lead %d commit %d log %d..%d] ", nd.id, st.RaftState, st.Term, st.Lead, st.Commit, nd.log.FirstIndex(), nd.log.LastIndex())
	}
	return b.String()
}

func TestGroupElectCommitFailover(t *testing.T) {
	h := newHarness(t, 3, 0)
	l := h.leader()
	var want []string
	for i := range 20 {
		d := fmt.Sprintf("a-%d", i)
		want = append(want, d)
		if err := l.g.Propose([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	h.settle()
	h.checkLogs()
	for _, nd := range h.nodes {
		if got := h.proposals(nd); !slices.Equal(got, want) {
			t.Fatalf("node %d committed %v, want %v", nd.id, got, want)
		}
	}
	h.crash(l)
	l2 := h.leader()
	if l2 == l {
		t.Fatal("the crashed leader still leads")
	}
	for i := range 20 {
		d := fmt.Sprintf("b-%d", i)
		want = append(want, d)
		if err := l2.g.Propose([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	h.settle()
	h.start(l) // restart from the persisted HardState and log
	for range 5 * DefaultElectionTicks {
		h.tickAll()
		h.settle()
	}
	h.checkLogs()
	for _, nd := range h.nodes {
		if got := h.proposals(nd); !slices.Equal(got, want) {
			t.Fatalf("node %d committed %v, want %v", nd.id, got, want)
		}
	}
	if st := l.store.State(); st.HardState.Term < l2.g.Status().Term || st.Applied != l.g.Status().Applied {
		t.Fatalf("restarted node saved %+v; want the new term %d and applied %d", st, l2.g.Status().Term, l.g.Status().Applied)
	}
}

// Under random message loss, reordering and duplication, random work
// order and crashes, no two nodes ever commit different entries at one
// index, and once healed every node holds every entry committed anywhere.
func TestGroupRandomFaults(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		// Elections only when the test asks (Campaign): raft draws election
		// timeouts from crypto/rand, which would make a run unreplayable.
		h := newHarness(rt, 3, 1000)
		pick := func(label string) *hnode { return h.nodes[rapid.IntRange(0, 2).Draw(rt, label)] }
		proposed := 0
		for range rapid.IntRange(50, 400).Draw(rt, "steps") {
			switch action := rapid.IntRange(0, 19).Draw(rt, "action"); {
			case action < 3:
				if nd := pick("tick"); nd.up {
					nd.g.Tick()
				}
			case action < 6: // a node does all its local work
				nd := pick("work")
				h.ready(nd)
				for nd.up && len(nd.appends) > 0 {
					h.doAppend(nd)
				}
				for nd.up && len(nd.applies) > 0 {
					h.doApply(nd)
				}
			case action == 6:
				h.ready(pick("ready"))
			case action == 7:
				h.doAppend(pick("append"))
			case action == 8:
				h.doApply(pick("apply"))
			case action < 12:
				if len(h.net) > 0 {
					h.deliver(rapid.IntRange(0, len(h.net)-1).Draw(rt, "deliver")) // any order
				}
			case action == 12:
				for len(h.net) > 0 {
					h.deliver(0)
				}
			case action == 13:
				if len(h.net) > 0 {
					i := rapid.IntRange(0, len(h.net)-1).Draw(rt, "drop")
					h.net = slices.Delete(h.net, i, i+1)
				}
			case action == 14:
				if len(h.net) > 0 {
					h.net = append(h.net, h.net[rapid.IntRange(0, len(h.net)-1).Draw(rt, "dup")])
				}
			case action < 17:
				if nd := pick("propose"); nd.up {
					proposed++
					_ = nd.g.Propose([]byte(fmt.Sprintf("p-%d", proposed)))
				}
			case action == 17 && rapid.Bool().Draw(rt, "campaign-or-crash"):
				if nd := pick("campaign"); nd.up {
					_ = nd.g.Campaign()
				}
			case action == 17:
				if nd := pick("crash"); nd.up {
					h.crash(nd)
				}
			default:
				if nd := pick("restart"); !nd.up {
					h.start(nd)
				}
			}
			h.checkLogs()
		}
		// Heal: everyone up, reliable network, until a new entry commits everywhere.
		for _, nd := range h.nodes {
			if !nd.up {
				h.start(nd)
			}
		}
		committedFinal := func(nd *hnode) bool { return slices.Contains(h.proposals(nd), "final") }
		for round := range 100 {
			h.settle()
			done := true
			for _, nd := range h.nodes {
				done = done && committedFinal(nd)
			}
			if done {
				break
			}
			var l *hnode
			for _, nd := range h.nodes {
				if nd.g.Status().RaftState == etcdraft.StateLeader {
					l = nd
				}
			}
			switch {
			case l == nil:
				_ = h.nodes[round%3].g.Campaign()
			case !committedFinal(l) && round%10 == 0:
				_ = l.g.Propose([]byte("final"))
			}
			h.tickAll() // heartbeats resume probing of followers whose messages were dropped, and carry the commit index
		}
		h.checkLogs()
		for _, nd := range h.nodes {
			if ps := h.proposals(nd); !slices.Contains(ps, "final") {
				rt.Fatalf("node %d did not commit the final entry after healing: %v; nodes: %s", nd.id, ps, h.describe())
			}
			for i, e := range h.committed {
				got, ok := nd.log.entry(i)
				if !ok || got.Term != e.Term || !bytes.Equal(got.Data, e.Data) {
					rt.Fatalf("node %d lost committed entry %d (%q term %d): has %q term %d (%v)", nd.id, i, e.Data, e.Term, got.Data, got.Term, ok)
				}
			}
		}
	})
}
