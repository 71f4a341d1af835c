package coord

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The model: what a dumb reading of the rules predicts for each command,
// kept apart from the State: members' sessions and heartbeat times, and
// each committed position as the set of finished offsets (a bit mask; the
// test's offsets stay below 64). Ownership is not modelled; the properties
// checked after every command (checkStep) say what it may do instead.
type model struct {
	members   map[string]map[string]*modelMember // group → member → what the model knows
	finished  map[string]map[TopicPartition]uint64
	topicSize map[string]int32
	maxGen    map[string]uint64 // the highest generation each group had
}

type modelMember struct {
	session          string
	lastHeartbeatMs  int64
	sessionTimeoutMs int64
}

func finishedMask(p Position) uint64 {
	var m uint64
	for o := int64(0); o < p.Next && o < 64; o++ {
		m |= 1 << o
	}
	for _, d := range p.Done {
		if d < 64 {
			m |= 1 << d
		}
	}
	return m
}

// predict returns the refusal the model expects for c on state s (nil:
// accepted) and, on acceptance, updates the model.
func (m *model) predict(s *State, c Command) error {
	if err := c.Validate(); err != nil {
		if !errors.Is(err, ErrInvalid) {
			panic(err)
		}
		return ErrInvalid
	}
	gm := m.members[c.Group]
	if gm == nil {
		gm = map[string]*modelMember{}
		m.members[c.Group] = gm
	}
	_, groupExists := s.groups[c.Group]
	switch {
	case c.DropTopic != nil:
		for _, g := range s.Groups() {
			for _, mb := range s.Members(g) {
				if slices.Contains(mb.Topics, c.DropTopic.Topic) || slices.ContainsFunc(mb.Owned, func(o Owned) bool { return o.Topic == c.DropTopic.Topic }) {
					return ErrGroupActive
				}
			}
		}
		for _, fin := range m.finished {
			for tp := range fin {
				if tp.Topic == c.DropTopic.Topic {
					delete(fin, tp)
				}
			}
		}
		return nil
	case c.Reset != nil:
		for _, mb := range s.Members(c.Group) {
			for _, o := range mb.Owned {
				if o.Topic == c.Reset.Topic {
					return ErrGroupActive
				}
			}
		}
		for _, known := range s.Topics(c.Group) {
			for _, pn := range c.Reset.Next {
				if known.Name == c.Reset.Topic && pn.Partition >= known.Partitions {
					return ErrTopicConflict
				}
			}
		}
		if m.finished[c.Group] == nil {
			m.finished[c.Group] = map[TopicPartition]uint64{}
		}
		for _, pn := range c.Reset.Next {
			m.finished[c.Group][TopicPartition{c.Reset.Topic, pn.Partition}] = finishedMask(Position{Next: pn.Next})
		}
		return nil
	case c.Join != nil:
		for _, t := range c.Join.Topics {
			for _, known := range s.Topics(c.Group) {
				if known.Name == t.Name && known.Partitions != t.Partitions {
					return ErrTopicConflict
				}
			}
		}
		mm := gm[c.Join.Member]
		if mm == nil {
			mm = &modelMember{}
			gm[c.Join.Member] = mm
		}
		mm.session = c.Join.Session
		mm.lastHeartbeatMs = max(mm.lastHeartbeatMs, c.AtMs)
		mm.sessionTimeoutMs = cmpOr(c.Join.SessionTimeoutMs, DefaultSessionTimeoutMs)
		return nil
	case !groupExists:
		return ErrUnknownGroup
	}
	member := func(id, session string) (*modelMember, error) {
		mm, ok := gm[id]
		if !ok {
			return nil, ErrUnknownMember
		}
		if mm.session != session {
			return nil, ErrStaleSession
		}
		return mm, nil
	}
	switch {
	case c.Heartbeat != nil:
		mm, err := member(c.Heartbeat.Member, c.Heartbeat.Session)
		if err != nil {
			return err
		}
		mm.lastHeartbeatMs = max(mm.lastHeartbeatMs, c.AtMs)
	case c.Leave != nil:
		if _, err := member(c.Leave.Member, c.Leave.Session); err != nil {
			return err
		}
		delete(gm, c.Leave.Member)
	case c.Expire != nil:
		mm, ok := gm[c.Expire.Member]
		if !ok {
			return ErrUnknownMember
		}
		expired := mm.lastHeartbeatMs+mm.sessionTimeoutMs <= c.AtMs
		for _, mb := range s.Members(c.Group) {
			for _, o := range mb.Owned {
				if mb.ID == c.Expire.Member && o.Revoking && o.RevokeDeadlineMs <= c.AtMs {
					expired = true
				}
			}
		}
		if !expired {
			return ErrNotExpired
		}
		delete(gm, c.Expire.Member)
	case c.RevokeDone != nil:
		if _, ok := gm[c.RevokeDone.Member]; !ok {
			return ErrUnknownMember
		}
		if c.RevokeDone.Generation > s.Generation(c.Group) {
			return ErrInvalid
		}
		mb := memberOf(s, c.Group, c.RevokeDone.Member)
		for _, tp := range c.RevokeDone.Partitions {
			i := slices.IndexFunc(mb.Owned, func(o Owned) bool { return o.TopicPartition == tp })
			if i < 0 || !mb.Owned[i].Revoking || c.RevokeDone.Generation < mb.Owned[i].RevokeGen {
				return ErrNotRevoking
			}
		}
	case c.Commit != nil:
		cm := c.Commit
		mb := memberOf(s, c.Group, cm.Member)
		if mb == nil {
			return ErrFenced
		}
		i := slices.IndexFunc(mb.Owned, func(o Owned) bool { return o.TopicPartition == cm.TopicPartition })
		if i < 0 || cm.Generation < mb.Owned[i].GrantedGen || cm.Generation > s.Generation(c.Group) {
			return ErrFenced
		}
		if m.finished[c.Group] == nil {
			m.finished[c.Group] = map[TopicPartition]uint64{}
		}
		m.finished[c.Group][cm.TopicPartition] |= finishedMask(cm.Position)
	}
	return nil
}

func memberOf(s *State, group, id string) *Member {
	for _, mb := range s.Members(group) {
		if mb.ID == id {
			return &mb
		}
	}
	return nil
}

var (
	modelGroups  = []string{"g1", "g2"}
	modelMembers = []string{"a", "b", "c", "d", "e"}
	modelTopics  = []string{"t1", "t2"}
)

func drawCommand(t *rapid.T, s *State, m *model, now int64) Command {
	group := rapid.SampledFrom(modelGroups).Draw(t, "group")
	c := Command{Group: group, AtMs: now}
	// Mostly members the group has, so that commands meet.
	var known []string
	for id := range m.members[group] {
		known = append(known, id)
	}
	slices.Sort(known)
	memberID := func() string {
		if len(known) > 0 && rapid.IntRange(0, 3).Draw(t, "known member") > 0 {
			return rapid.SampledFrom(known).Draw(t, "member")
		}
		return rapid.SampledFrom(modelMembers).Draw(t, "member")
	}
	session := func(id string) string {
		if mm, ok := m.members[group][id]; ok && rapid.IntRange(0, 5).Draw(t, "stale session") > 0 {
			return mm.session
		}
		return rapid.SampledFrom([]string{"s1", "s2", "s3"}).Draw(t, "session")
	}
	gen := func() uint64 {
		g := s.Generation(group)
		return rapid.Uint64Range(max(g, 3)-3, g+1).Draw(t, "generation")
	}
	switch rapid.IntRange(0, 11).Draw(t, "kind") {
	case 11:
		return Command{AtMs: now, DropTopic: &DropTopic{Topic: rapid.SampledFrom(modelTopics).Draw(t, "dropped topic")}}
	case 10:
		r := &ResetPositions{Topic: rapid.SampledFrom(modelTopics).Draw(t, "topic")}
		for p := range int32(8) {
			if rapid.IntRange(0, 2).Draw(t, "reset partition") == 0 {
				r.Next = append(r.Next, PartitionNext{Partition: p, Next: int64(rapid.IntRange(0, 30).Draw(t, "reset to"))})
			}
		}
		if len(r.Next) == 0 {
			r.Next = []PartitionNext{{Partition: 0}}
		}
		c.Reset = r
	case 0, 1:
		id := memberID()
		j := &Join{Member: id, Session: session(id), Node: NodeID(id[0]-'a') + 1}
		if rapid.IntRange(0, 9).Draw(t, "storage-off node") == 0 {
			j.Node = 0 // a sidecar holding no replicas
		}
		for _, name := range modelTopics {
			if rapid.Bool().Draw(t, "subscribes "+name) {
				top := topicsOf(name)[0]
				top.Partitions = m.topicSize[name]
				top.Replicas = top.Replicas[:0]
				for p := range top.Partitions {
					top.Replicas = append(top.Replicas, []NodeID{NodeID(p%5 + 1), NodeID((int(p)+rapid.IntRange(1, 4).Draw(t, "replica"))%5 + 1)})
				}
				if rapid.IntRange(0, 19).Draw(t, "wrong partitions") == 0 {
					top.Partitions++
					top.Replicas = nil
				}
				j.Topics = append(j.Topics, top)
			}
		}
		if len(j.Topics) == 0 {
			j.Topics = []Topic{{Name: "t1", Partitions: m.topicSize["t1"]}}
		}
		j.SessionTimeoutMs = rapid.SampledFrom([]int64{0, MinSessionTimeoutMs, 30_000}).Draw(t, "session timeout")
		j.RevokeTimeoutMs = rapid.SampledFrom([]int64{0, MinRevokeTimeoutMs}).Draw(t, "revoke timeout")
		j.Consumers = uint32(rapid.IntRange(0, 3).Draw(t, "consumers"))
		c.Join = j
	case 2:
		id := memberID()
		c.Heartbeat = &Heartbeat{Member: id, Session: session(id), Yield: rapid.IntRange(0, 4).Draw(t, "yield") == 0, Degraded: rapid.IntRange(0, 3).Draw(t, "degraded") == 0,
			Consumers: uint32(rapid.IntRange(0, 3).Draw(t, "consumers"))}
	case 3:
		id := memberID()
		c.Leave = &Leave{Member: id, Session: session(id)}
	case 4:
		c.Expire = &Expire{Member: memberID()}
	case 5, 6:
		id := memberID()
		a, ok := s.Assignment(group, id)
		if ok && len(a.Revoking) > 0 && rapid.IntRange(0, 4).Draw(t, "stale revoke done") > 0 {
			// Some of what it is asked to give up, with the current generation.
			var parts []TopicPartition
			for _, tp := range a.Revoking {
				if rapid.Bool().Draw(t, "done") {
					parts = append(parts, tp)
				}
			}
			if len(parts) == 0 {
				parts = a.Revoking[:1]
			}
			c.RevokeDone = &RevokeDone{Member: id, Generation: a.Generation, Partitions: parts}
		} else {
			c.RevokeDone = &RevokeDone{Member: id, Generation: gen(), Partitions: []TopicPartition{{rapid.SampledFrom(modelTopics).Draw(t, "topic"), int32(rapid.IntRange(0, 7).Draw(t, "partition"))}}}
		}
	default:
		id := memberID()
		tp := TopicPartition{rapid.SampledFrom(modelTopics).Draw(t, "topic"), int32(rapid.IntRange(0, 7).Draw(t, "partition"))}
		g := gen()
		if a, ok := s.Assignment(group, id); ok && len(a.Owned) > 0 && rapid.IntRange(0, 3).Draw(t, "fenced commit") > 0 {
			tp, g = rapid.SampledFrom(a.Owned).Draw(t, "owned"), a.Generation
		}
		pos := Position{Next: int64(rapid.IntRange(0, 20).Draw(t, "next"))}
		for o := pos.Next + 1; o < 40; o++ {
			if rapid.IntRange(0, 5).Draw(t, "done") == 0 {
				pos.Done = append(pos.Done, o)
			}
		}
		c.Commit = &Commit{Member: id, Generation: g, TopicPartition: tp, Position: pos}
	}
	return c
}

func mustEncode(t rapid.TB, s *State) []byte {
	b, err := EncodeState(s)
	if err != nil {
		t.Fatalf("encode state: %v", err)
	}
	return b
}

type ownership struct {
	owner    string
	revoking bool
}

func ownershipOf(s *State, group string) map[TopicPartition]ownership {
	out := map[TopicPartition]ownership{}
	for _, mb := range s.Members(group) {
		for _, o := range mb.Owned {
			out[o.TopicPartition] = ownership{mb.ID, o.Revoking}
		}
	}
	return out
}

// TestApplyModel: random sequences of joins (new members, the same
// incarnation again, restarts), heartbeats (yielding or not), leaves,
// expirations (due or stale, some proposed by Next), revocations answered
// in any order and any part, and commits (owned or fenced, ahead or
// behind) across two groups, with a clock that mostly runs forward. After
// every command: the result is the model's; two states fed the same
// commands encode the same; a refused command changed nothing; every
// invariant holds (check: no partition owned twice, the assignment rule at
// its fixpoint); committed positions never go backwards and are the union
// of the accepted commits; and the assignment changed only as checkStep
// allows.
func TestApplyModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := NewState(), NewState()
		m := &model{members: map[string]map[string]*modelMember{}, finished: map[string]map[TopicPartition]uint64{},
			maxGen: map[string]uint64{}, topicSize: map[string]int32{"t1": int32(rapid.IntRange(1, 8).Draw(t, "t1 partitions")), "t2": int32(rapid.IntRange(1, 8).Draw(t, "t2 partitions"))}}
		now := int64(1_000)
		for i := range rapid.IntRange(1, 120).Draw(t, "commands") {
			switch rapid.IntRange(0, 9).Draw(t, "clock") {
			case 0:
				now += rapid.Int64Range(0, 40_000).Draw(t, "advance")
			case 1:
				now = max(0, now-rapid.Int64Range(0, 2_000).Draw(t, "back")) // another leader's clock
			default:
				now += 10
			}
			var cmds []Command
			if rapid.IntRange(0, 5).Draw(t, "next") == 0 {
				cmds, _ = Next(a, now)
			} else {
				cmds = []Command{drawCommand(t, a, m, now)}
			}
			for _, c := range cmds {
				step(t, i, a, b, m, c)
			}
		}
		// A clone is independent: changing it leaves the original alone.
		orig := mustEncode(t, a)
		cl := a.Clone()
		cl.Apply(Command{Group: "g1", AtMs: now, Join: &Join{Member: "clone-only", Session: "s", Node: 9, Topics: []Topic{{Name: "t1", Partitions: m.topicSize["t1"]}}}})
		if !bytes.Equal(mustEncode(t, a), orig) {
			t.Fatalf("applying to a clone changed the original")
		}
	})
}

func step(t *rapid.T, i int, a, b *State, m *model, c Command) {
	before := a.Clone()
	beforeBytes := mustEncode(t, a)
	wantErr := m.predict(a, c)
	ra, rb := a.Apply(c), b.Apply(c)
	if (ra.Err == nil) != (rb.Err == nil) || ra.Err != nil && ra.Err.Error() != rb.Err.Error() || ra.Generation != rb.Generation {
		t.Fatalf("command %d %s: two states answered %+v and %+v", i, describe(c), ra, rb)
	}
	if wantErr == nil && ra.Err != nil || wantErr != nil && !errors.Is(ra.Err, wantErr) {
		t.Fatalf("command %d %s: got %v, the model expects %v", i, describe(c), ra.Err, wantErr)
	}
	enc := mustEncode(t, a)
	if !bytes.Equal(enc, mustEncode(t, b)) {
		t.Fatalf("command %d: two states fed the same commands encode differently", i)
	}
	if ra.Err != nil && !bytes.Equal(enc, beforeBytes) {
		t.Fatalf("command %d %s: refused (%v) but the state changed", i, describe(c), ra.Err)
	}
	if err := a.check(); err != nil {
		t.Fatalf("command %d %s: invariant broken: %v", i, describe(c), err)
	}
	d, err := DecodeState(enc)
	if err != nil {
		t.Fatalf("command %d: decode the encoded state: %v", i, err)
	}
	if !bytes.Equal(mustEncode(t, d), enc) || !bytes.Equal(mustEncode(t, a.Clone()), enc) {
		t.Fatalf("command %d: the state does not round-trip through EncodeState/DecodeState and Clone", i)
	}
	checkPositions(t, i, c, before, a, m)
	if c.DropTopic != nil && ra.Err == nil { // nothing of the topic is left
		for _, g := range a.Groups() {
			if slices.ContainsFunc(a.Topics(g), func(t Topic) bool { return t.Name == c.DropTopic.Topic }) ||
				slices.ContainsFunc(a.LagInputs(g), func(p PartitionState) bool { return p.Topic == c.DropTopic.Topic }) {
				t.Fatalf("command %d %s: group %s still knows the topic", i, describe(c), g)
			}
		}
	}
	checkStep(t, i, c, ra, before, a)
	for _, g := range modelGroups {
		if _, ok := a.groups[g]; ok && a.Generation(g) < m.maxGen[g] {
			t.Fatalf("command %d %s: group %s at generation %d, below the %d it had", i, describe(c), g, a.Generation(g), m.maxGen[g])
		}
		m.maxGen[g] = max(m.maxGen[g], a.Generation(g))
	}
	for _, g := range a.names {
		checkSettled(t, i, c, a, g)
	}
}

// checkPositions: no committed position moved backwards but through an
// accepted reset of it, and each is the union of the commits the model
// accepted since the last reset.
func checkPositions(t *rapid.T, i int, c Command, before, after *State, m *model) {
	for _, g := range modelGroups {
		for _, tp := range slices.SortedFunc(maps.Keys(m.finished[g]), compareTP) {
			p, _ := after.Position(g, tp.Topic, tp.Partition)
			if got, want := finishedMask(p), m.finished[g][tp]; got != want {
				t.Fatalf("command %d %s: %s %s/%d finished %b, the model has %b", i, describe(c), g, tp.Topic, tp.Partition, got, want)
			}
			reset := c.Reset != nil && c.Group == g && c.Reset.Topic == tp.Topic &&
				slices.ContainsFunc(c.Reset.Next, func(pn PartitionNext) bool { return pn.Partition == tp.Partition }) ||
				c.DropTopic != nil && c.DropTopic.Topic == tp.Topic
			if old, ok := before.Position(g, tp.Topic, tp.Partition); ok && !p.Covers(old) && !reset {
				t.Fatalf("command %d %s: %s %s/%d went back from %+v to %+v", i, describe(c), g, tp.Topic, tp.Partition, old, p)
			}
		}
	}
}

// checkStep: how the assignment may change in one command.
//
//   - The generation never decreases; the assignment changes only with it.
//   - A partition leaves a member that stays (same session) only through
//     that member's RevokeDone naming it: never straight from one live
//     owner to another (no two owners at once, no stop-the-world).
//   - A partition that was not being revoked is never granted to another
//     member while its owner stays.
//   - A RevokeDone starts no revocation, and grants only what it released.
//   - From a settled group, a Leave or Expire starts no revocation (the
//     leaver's partitions go straight to the others), and a new member's
//     Join revokes at most ceil(P/n) partitions of each topic (n: the
//     members taking the topic after it).
func checkStep(t *rapid.T, i int, c Command, r Result, before, after *State) {
	for _, g := range modelGroups {
		gb, ga := before.Generation(g), after.Generation(g)
		if _, exists := after.groups[g]; exists && ga < gb {
			t.Fatalf("command %d %s: generation of %s went from %d to %d", i, describe(c), g, gb, ga)
		}
		ob, oa := ownershipOf(before, g), ownershipOf(after, g)
		if ga == gb && !maps.Equal(ob, oa) {
			t.Fatalf("command %d %s: the assignment of %s changed in generation %d", i, describe(c), g, ga)
		}
		if g != c.Group && !maps.Equal(ob, oa) {
			t.Fatalf("command %d %s: the assignment of another group (%s) changed", i, describe(c), g)
		}
	}
	if r.Err != nil {
		return
	}
	g := c.Group
	ob, oa := ownershipOf(before, g), ownershipOf(after, g)
	sessionsBefore, sessionsAfter := map[string]string{}, map[string]string{}
	for _, mb := range before.Members(g) {
		sessionsBefore[mb.ID] = mb.Session
	}
	for _, mb := range after.Members(g) {
		sessionsAfter[mb.ID] = mb.Session
	}
	newRevocations := map[string]int{}
	for _, tp := range slices.SortedFunc(maps.Keys(oa), compareTP) {
		if oa[tp].revoking && (!ob[tp].revoking || ob[tp].owner != oa[tp].owner) {
			newRevocations[tp.Topic]++
		}
	}
	for _, tp := range slices.SortedFunc(maps.Keys(ob), compareTP) {
		was, now := ob[tp], oa[tp]
		stays := sessionsAfter[was.owner] == sessionsBefore[was.owner]
		if now.owner == was.owner || !stays {
			continue // kept, or its owner left, expired or restarted
		}
		released := c.RevokeDone != nil && c.RevokeDone.Member == was.owner && slices.Contains(c.RevokeDone.Partitions, tp)
		if !released {
			t.Fatalf("command %d %s: %s/%d left %s (revoking %v) for %q without RevokeDone", i, describe(c), tp.Topic, tp.Partition, was.owner, was.revoking, now.owner)
		}
	}
	// No churn: a member does not have one revocation cancelled while
	// another of the same topic starts.
	for _, tp := range slices.SortedFunc(maps.Keys(ob), compareTP) {
		was, now := ob[tp], oa[tp]
		if !was.revoking || now.revoking || now.owner != was.owner {
			continue
		}
		for _, other := range slices.SortedFunc(maps.Keys(oa), compareTP) {
			if other.Topic == tp.Topic && oa[other].owner == was.owner && oa[other].revoking && !ob[other].revoking {
				t.Fatalf("command %d %s: %s's revocation of %s/%d cancelled while %s/%d starts", i, describe(c), was.owner, tp.Topic, tp.Partition, other.Topic, other.Partition)
			}
		}
	}
	if c.RevokeDone != nil {
		if len(newRevocations) > 0 {
			t.Fatalf("command %d %s: a RevokeDone started revocations %v", i, describe(c), newRevocations)
		}
		for _, tp := range slices.SortedFunc(maps.Keys(oa), compareTP) {
			if _, had := ob[tp]; !had && !slices.Contains(c.RevokeDone.Partitions, tp) {
				t.Fatalf("command %d %s: a RevokeDone granted %s/%d, which it did not release", i, describe(c), tp.Topic, tp.Partition)
			}
		}
	}
	gb := before.groups[g]
	if gb == nil || !gb.settled() {
		return
	}
	if c.Leave != nil || c.Expire != nil {
		if len(newRevocations) > 0 {
			t.Fatalf("command %d %s: a member leaving a settled group started revocations %v", i, describe(c), newRevocations)
		}
	}
	if c.Join != nil {
		if _, was := sessionsBefore[c.Join.Member]; was {
			return
		}
		for _, topic := range after.Topics(g) {
			n := len(modelEligible(after, g, topic.Name))
			if n > 0 && newRevocations[topic.Name] > ceilDiv(int(topic.Partitions), n) {
				t.Fatalf("command %d %s: a new member revoked %d partitions of %s, more than ceil(%d/%d)", i, describe(c), newRevocations[topic.Name], topic.Name, topic.Partitions, n)
			}
		}
	}
}

// checkSettled: once nothing is being revoked, every partition of a topic
// some member takes is owned by exactly one member taking it, those
// members' counts are at most one apart, and members not taking it own
// none of it.
func checkSettled(t *rapid.T, i int, c Command, s *State, g string) {
	if !s.groups[g].settled() {
		return
	}
	own := ownershipOf(s, g)
	for _, topic := range s.Topics(g) {
		counts := map[string]int{}
		for _, id := range modelEligible(s, g, topic.Name) {
			counts[id] = 0
		}
		for p := range topic.Partitions {
			o, ok := own[TopicPartition{topic.Name, p}]
			if len(counts) == 0 {
				if ok {
					t.Fatalf("command %d %s: %s %s/%d owned by %s, though no member takes the topic", i, describe(c), g, topic.Name, p, o.owner)
				}
				continue
			}
			if _, takes := counts[o.owner]; !ok || !takes {
				t.Fatalf("command %d %s: settled, yet %s %s/%d is owned by %q", i, describe(c), g, topic.Name, p, o.owner)
			}
			counts[o.owner]++
		}
		if len(counts) > 0 {
			v := slices.Collect(maps.Values(counts))
			if slices.Max(v)-slices.Min(v) > 1 {
				t.Fatalf("command %d %s: settled, yet %s's counts on %s are %v", i, describe(c), g, topic.Name, counts)
			}
		}
	}
}

func TestModelHelpers(t *testing.T) {
	if got := finishedMask(Position{Next: 3, Done: []int64{5}}); got != 0b100111 {
		t.Fatalf("finishedMask = %b", got)
	}
	if p := merge(Position{Next: 2, Done: []int64{4, 6}}, Position{Next: 3, Done: []int64{5, 9}}); !p.Equal(Position{Next: 3, Done: []int64{4, 5, 6, 9}}) {
		t.Fatalf("merge = %+v", p)
	}
	if p := merge(Position{Next: 2, Done: []int64{3, 4}}, Position{Next: 0, Done: []int64{2}}); !p.Equal(Position{Next: 5}) || p.Done != nil {
		t.Fatalf("merge = %+v", p)
	}
	_ = fmt.Sprint
}

// modelEligible is the rule for who may own a topic's partitions, read
// plainly: the members taking the topic (subscribing, not yielding) that
// are not degraded, or all of them when every one is degraded.
func modelEligible(s *State, group, topic string) []string {
	var taking, healthy []string
	for _, mb := range s.Members(group) {
		if mb.Yield || !mb.subscribes(topic) {
			continue
		}
		taking = append(taking, mb.ID)
		if !mb.Degraded {
			healthy = append(healthy, mb.ID)
		}
	}
	if len(healthy) > 0 {
		return healthy
	}
	return taking
}
