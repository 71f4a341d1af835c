package coord

import (
	"cmp"
	"maps"
	"slices"
)

// NodeID is a node's id in the cluster (engine/meta.NodeID).
type NodeID = uint64

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func compareTP(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// Position is a group's committed progress on one partition, as the
// delivery tracker reports it (engine/groups.Position): Next is the lowest
// offset not yet finished, Done the finished offsets above it, ascending.
type Position struct {
	Next int64
	Done []int64
}

// Equal reports whether two positions are the same.
func (p Position) Equal(o Position) bool {
	return p.Next == o.Next && slices.Equal(p.Done, o.Done)
}

// Covers reports whether every offset finished in o is finished in p: p is
// o or ahead of it.
func (p Position) Covers(o Position) bool {
	if p.Next < o.Next {
		return false
	}
	for _, d := range o.Done {
		if d >= p.Next {
			if _, ok := slices.BinarySearch(p.Done, d); !ok {
				return false
			}
		}
	}
	return true
}

// merge returns the position whose finished offsets are those of p and o
// together: the larger Next, the Done offsets of both above it, and Next
// advanced over the ones that follow it without a gap.
func merge(p, o Position) Position {
	next := max(p.Next, o.Next)
	var done []int64
	i, j := 0, 0
	for i < len(p.Done) || j < len(o.Done) {
		var d int64
		switch {
		case j == len(o.Done) || i < len(p.Done) && p.Done[i] < o.Done[j]:
			d = p.Done[i]
			i++
		case i == len(p.Done) || o.Done[j] < p.Done[i]:
			d = o.Done[j]
			j++
		default: // equal
			d = p.Done[i]
			i, j = i+1, j+1
		}
		if d >= next {
			done = append(done, d)
		}
	}
	k := 0
	for k < len(done) && done[k] == next {
		next++
		k++
	}
	if k == len(done) {
		return Position{Next: next}
	}
	return Position{Next: next, Done: slices.Clip(done[k:])}
}

// Owned is one partition a member owns.
type Owned struct {
	TopicPartition
	// GrantedGen is the generation the member got the partition in.
	// Commits for it carry a generation at least this (and at most the
	// group's): a commit from before the grant, an earlier owner's or an
	// earlier incarnation's, is fenced.
	GrantedGen uint64
	// Revoking: the member is asked to give the partition up (stop
	// delivering it, let in-flight deliveries finish or hand them back,
	// commit) and to say so with RevokeDone. It still owns it until then.
	Revoking bool
	// RevokeGen is the generation the revocation was asked in.
	RevokeGen uint64
	// RevokeDeadlineMs is when the member is expired if it has not said
	// RevokeDone (logical time, as Command.AtMs).
	RevokeDeadlineMs int64
}

// Member is one member of a group: one sidecar's subscription.
type Member struct {
	// ID is stable across restarts of the sidecar (its node id and
	// subscription).
	ID string
	// Session names the member's incarnation (a sidecar process); a Join
	// with another session is a restart of the member.
	Session string
	// Node is the node the member runs on.
	Node NodeID
	// Topics are the topics it subscribes to, sorted.
	Topics []string
	// LastHeartbeatMs is the latest time it was heard from (Join,
	// Heartbeat), logical time as Command.AtMs.
	LastHeartbeatMs int64
	// SessionTimeoutMs: the member is expired when it has not been heard
	// from for this long.
	SessionTimeoutMs int64
	// RevokeTimeoutMs: the member is expired when it has not answered a
	// revocation for this long.
	RevokeTimeoutMs int64
	// Yield: the member gives its partitions up (its app is not connected)
	// and is given none.
	Yield bool
	// Degraded: its breakers have held its deliveries too long; it is given
	// partitions of a topic only when every member taking the topic is
	// degraded.
	Degraded bool
	// Consumers are the apps connected to the member's sidecar that take
	// its subscription, as its last Join or Heartbeat said (0 from a
	// release before the count, or yielding: none connected). Only
	// reported (spool group describe sums them over the group's members):
	// assignment never reads it.
	Consumers uint32
	// Owned are the partitions it owns, sorted by topic and partition.
	Owned []Owned
}

// SessionEndsMs is when the member's session ends unless it is heard from.
func (m *Member) SessionEndsMs() int64 { return m.LastHeartbeatMs + m.SessionTimeoutMs }

// RevokeDeadlineMs is the earliest deadline of the member's revocations,
// and false when it has none.
func (m *Member) RevokeDeadlineMs() (int64, bool) {
	var at int64
	found := false
	for _, o := range m.Owned {
		if o.Revoking && (!found || o.RevokeDeadlineMs < at) {
			at, found = o.RevokeDeadlineMs, true
		}
	}
	return at, found
}

func (m *Member) subscribes(topic string) bool {
	_, ok := slices.BinarySearch(m.Topics, topic)
	return ok
}

func (m *Member) ownedIndex(tp TopicPartition) (int, bool) {
	return slices.BinarySearchFunc(m.Owned, tp, func(o Owned, tp TopicPartition) int { return compareTP(o.TopicPartition, tp) })
}

func (m *Member) clone() *Member {
	c := *m
	c.Topics = slices.Clone(m.Topics)
	c.Owned = slices.Clone(m.Owned)
	return &c
}

// Topic is what the group knows of a topic its members subscribe to.
type Topic struct {
	Name       string
	Partitions int32
	// Replicas lists, per partition, the nodes holding a replica of it (for
	// the preference of a member on such a node); nil when not known.
	Replicas [][]NodeID
}

func (t Topic) local(p int32, node NodeID) bool {
	return int(p) < len(t.Replicas) && slices.Contains(t.Replicas[p], node)
}

func cloneTopic(t Topic) Topic {
	c := Topic{Name: t.Name, Partitions: t.Partitions}
	if t.Replicas != nil {
		c.Replicas = make([][]NodeID, len(t.Replicas))
		for i, r := range t.Replicas {
			c.Replicas[i] = slices.Clone(r)
		}
	}
	return c
}

// group is one consumer group's state.
type group struct {
	name string
	// generation is the group's generation; lastGen points at the State's
	// last generation, which every group's generations are drawn from.
	generation uint64
	lastGen    *uint64
	members    []*Member // by id
	topics     []Topic   // by name: those a member subscribes to or owns a partition of
	positions  map[TopicPartition]Position
}

func (g *group) member(id string) (*Member, int, bool) {
	i, ok := slices.BinarySearchFunc(g.members, id, func(m *Member, id string) int { return cmp.Compare(m.ID, id) })
	if !ok {
		return nil, i, false
	}
	return g.members[i], i, true
}

func (g *group) topic(name string) (*Topic, bool) {
	i, ok := slices.BinarySearchFunc(g.topics, name, func(t Topic, name string) int { return cmp.Compare(t.Name, name) })
	if !ok {
		return nil, false
	}
	return &g.topics[i], true
}

// owner returns the member owning tp.
func (g *group) owner(tp TopicPartition) (*Member, *Owned, bool) {
	for _, m := range g.members {
		if i, ok := m.ownedIndex(tp); ok {
			return m, &m.Owned[i], true
		}
	}
	return nil, nil, false
}

func (g *group) empty() bool { return len(g.members) == 0 && len(g.positions) == 0 }

func (g *group) clone(lastGen *uint64) *group {
	c := &group{name: g.name, generation: g.generation, lastGen: lastGen, positions: make(map[TopicPartition]Position, len(g.positions))}
	for _, m := range g.members {
		c.members = append(c.members, m.clone())
	}
	for _, t := range g.topics {
		c.topics = append(c.topics, cloneTopic(t))
	}
	for tp, p := range g.positions {
		c.positions[tp] = Position{Next: p.Next, Done: slices.Clone(p.Done)}
	}
	return c
}

// State is the state of one coordinator (one partition of the offsets
// topic): the groups it coordinates. Its zero value is not usable: use
// NewState. A State is not safe for concurrent use; readers on other
// goroutines take a Clone.
type State struct {
	groups map[string]*group
	names  []string // the group names, sorted
	// lastGen is the last generation any group got. Generations are drawn
	// from one counter so that a group deleted (no members, no positions)
	// and created again starts above every generation it had before: what
	// a member of its earlier life still sends stays fenced.
	lastGen uint64
}

// NewState returns the state before the first command.
func NewState() *State { return &State{groups: map[string]*group{}} }

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c := &State{groups: make(map[string]*group, len(s.groups)), names: slices.Clone(s.names), lastGen: s.lastGen}
	for k, g := range s.groups {
		c.groups[k] = g.clone(&c.lastGen)
	}
	return c
}

// Groups returns the names of the groups, sorted: those with members or
// committed positions.
func (s *State) Groups() []string { return slices.Clone(s.names) }

// Generation returns a group's generation (0 for no such group). It grows
// with every change of the group's assignment, and a group created again
// after it was dropped starts above every generation it had.
func (s *State) Generation(group string) uint64 {
	if g, ok := s.groups[group]; ok {
		return g.generation
	}
	return 0
}

// Members returns copies of a group's members, sorted by id.
func (s *State) Members(group string) []Member {
	g, ok := s.groups[group]
	if !ok {
		return nil
	}
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, *m.clone())
	}
	return out
}

// Topics returns copies of what a group knows of its topics, sorted by name.
func (s *State) Topics(group string) []Topic {
	g, ok := s.groups[group]
	if !ok {
		return nil
	}
	out := make([]Topic, 0, len(g.topics))
	for _, t := range g.topics {
		out = append(out, cloneTopic(t))
	}
	return out
}

// Assignment is what a member is told: deliver Owned (minus Revoking),
// stop delivering Revoking, commit it, and say RevokeDone.
type Assignment struct {
	// Generation is the group's generation: a member stamps its
	// deliveries and commits with it.
	Generation uint64
	// Owned are the partitions the member owns, Revoking ones included,
	// sorted.
	Owned []TopicPartition
	// Revoking are the partitions it is asked to give up, sorted.
	Revoking []TopicPartition
}

// Assignment returns a member's assignment, and false when the group has
// no such member (it must Join).
func (s *State) Assignment(group, member string) (Assignment, bool) {
	g, ok := s.groups[group]
	if !ok {
		return Assignment{}, false
	}
	m, _, ok := g.member(member)
	if !ok {
		return Assignment{}, false
	}
	a := Assignment{Generation: g.generation}
	for _, o := range m.Owned {
		a.Owned = append(a.Owned, o.TopicPartition)
		if o.Revoking {
			a.Revoking = append(a.Revoking, o.TopicPartition)
		}
	}
	return a, true
}

// Position returns a group's committed position on a partition, and false
// when the group never committed one there.
func (s *State) Position(group, topic string, partition int32) (Position, bool) {
	g, ok := s.groups[group]
	if !ok {
		return Position{}, false
	}
	p, ok := g.positions[TopicPartition{topic, partition}]
	if !ok {
		return Position{}, false
	}
	return Position{Next: p.Next, Done: slices.Clone(p.Done)}, true
}

// PartitionState is what the lag of a group on one partition is computed
// from, with the partition's committed end (which only the engine knows):
// messages behind = end - Position.Next - the Done offsets below end.
type PartitionState struct {
	TopicPartition
	// Position is the committed position (zero when none: the group starts
	// where its offset-reset policy says).
	Position  Position
	Committed bool
	// Owner is the member owning the partition ("" when none).
	Owner    string
	Revoking bool
}

// LagInputs returns, for every partition of every topic the group knows
// and every partition it committed on, the committed position and the
// owner, sorted.
func (s *State) LagInputs(group string) []PartitionState {
	g, ok := s.groups[group]
	if !ok {
		return nil
	}
	seen := map[TopicPartition]bool{}
	var out []PartitionState
	add := func(tp TopicPartition) {
		if seen[tp] {
			return
		}
		seen[tp] = true
		ps := PartitionState{TopicPartition: tp}
		if p, ok := g.positions[tp]; ok {
			ps.Position, ps.Committed = Position{Next: p.Next, Done: slices.Clone(p.Done)}, true
		}
		if m, o, ok := g.owner(tp); ok {
			ps.Owner, ps.Revoking = m.ID, o.Revoking
		}
		out = append(out, ps)
	}
	for _, t := range g.topics {
		for p := range t.Partitions {
			add(TopicPartition{t.Name, p})
		}
	}
	for _, tp := range slices.SortedFunc(maps.Keys(g.positions), compareTP) {
		add(tp)
	}
	slices.SortFunc(out, func(a, b PartitionState) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	return out
}

// addGroup inserts an empty group.
func (s *State) addGroup(name string) *group {
	g := &group{name: name, generation: s.lastGen, lastGen: &s.lastGen, positions: map[TopicPartition]Position{}}
	i, _ := slices.BinarySearch(s.names, name)
	s.names = slices.Insert(s.names, i, name)
	s.groups[name] = g
	return g
}

// dropIfEmpty removes a group with no members and no positions.
func (s *State) dropIfEmpty(g *group) {
	if !g.empty() {
		return
	}
	delete(s.groups, g.name)
	i, _ := slices.BinarySearch(s.names, g.name)
	s.names = slices.Delete(s.names, i, i+1)
}
