package coord

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// The assignment rule, per topic of a group (topics in name order):
//
//   - The eligible members are those subscribing to the topic that neither
//     yield nor are degraded, in id order; when every member subscribing
//     and not yielding is degraded, those (so a downstream down for every
//     member changes nothing). With none, every owned partition of the
//     topic is revoked and none is granted.
//   - With P partitions and n eligible members, each gets a quota of P/n or
//     P/n+1 partitions; the P%n larger quotas go to the members ranked
//     first by min(owned, P/n+1) descending (partitions being revoked count
//     as owned), then by a hash of topic and member id (so the larger
//     quotas of several topics do not all fall on the same member), then
//     by id. Clamping the count at P/n+1 keeps the ranking stable while
//     partitions move, so a quota never changes hands halfway.
//   - An eligible member keeps up to its quota of the partitions it owns:
//     first those not being revoked, then those on its node (a replica
//     there: local reads), then the lowest numbers. A kept partition that
//     was being revoked has its revocation cancelled; every other owned
//     partition (of a member over quota, yielding or no longer subscribing)
//     is revoked. It stays owned until RevokeDone.
//   - Each partition no one owns, lowest number first, is granted to an
//     eligible member below its quota: one on a node holding a replica of
//     it first, then the one furthest below its quota, then the first
//     ranked.
//
// So a partition moves only when its owner is gone, yields, no longer
// subscribes, or is over its quota; after any Apply the rule finds nothing
// more to do (the model test checks this fixpoint after every command).

// change is one step of a plan.
type change struct {
	member string
	tp     TopicPartition
	kind   changeKind
}

type changeKind int

const (
	grant changeKind = iota
	revoke
	cancel
)

// plan computes the changes the assignment rule makes to the group now.
func (g *group) plan() []change {
	var out []change
	owners := map[TopicPartition]*Member{}
	for _, m := range g.members {
		for _, o := range m.Owned {
			owners[o.TopicPartition] = m
		}
	}
	for _, t := range g.topics {
		out = g.planTopic(t, owners, out)
	}
	return out
}

// eligible returns the members that may own partitions of topic, in id
// order: those taking it that are not degraded, or, when all of them are,
// all of them.
func (g *group) eligible(topic string) []*Member {
	var taking, healthy []*Member
	for _, m := range g.members {
		if !m.Yield && m.subscribes(topic) {
			taking = append(taking, m)
			if !m.Degraded {
				healthy = append(healthy, m)
			}
		}
	}
	if len(healthy) > 0 {
		return healthy
	}
	return taking
}

func (g *group) planTopic(t Topic, owners map[TopicPartition]*Member, out []change) []change {
	eligible := g.eligible(t.Name)
	owned := func(m *Member) []Owned {
		lo, _ := slices.BinarySearchFunc(m.Owned, t.Name, func(o Owned, name string) int { return cmp.Compare(o.Topic, name) })
		hi := lo
		for hi < len(m.Owned) && m.Owned[hi].Topic == t.Name {
			hi++
		}
		return m.Owned[lo:hi]
	}
	isEligible := func(m *Member) bool { return slices.Contains(eligible, m) }
	// Members owning partitions of the topic they may not keep.
	for _, m := range g.members {
		if isEligible(m) {
			continue
		}
		for _, o := range owned(m) {
			if !o.Revoking {
				out = append(out, change{m.ID, o.TopicPartition, revoke})
			}
		}
	}
	n := len(eligible)
	if n == 0 {
		return out
	}
	p := int(t.Partitions)
	q, r := p/n, p%n
	type rank struct {
		m      *Member
		key    int
		hash   uint64
		quota  int
		filled int // kept and granted
	}
	ranks := make([]*rank, n)
	for i, m := range eligible {
		ranks[i] = &rank{m: m, key: min(len(owned(m)), q+1), hash: tieBreak(t.Name, m.ID)}
	}
	slices.SortStableFunc(ranks, func(a, b *rank) int {
		return cmp.Or(cmp.Compare(b.key, a.key), cmp.Compare(a.hash, b.hash), cmp.Compare(a.m.ID, b.m.ID))
	})
	for i, rk := range ranks {
		rk.quota = q
		if i < r {
			rk.quota = q + 1
		}
		mine := slices.Clone(owned(rk.m))
		slices.SortStableFunc(mine, func(a, b Owned) int {
			return cmp.Or(compareBool(a.Revoking, b.Revoking), compareBool(!t.local(a.Partition, rk.m.Node), !t.local(b.Partition, rk.m.Node)),
				cmp.Compare(a.Partition, b.Partition))
		})
		for j, o := range mine {
			switch keep := j < rk.quota; {
			case keep && o.Revoking:
				out = append(out, change{rk.m.ID, o.TopicPartition, cancel})
			case !keep && !o.Revoking:
				out = append(out, change{rk.m.ID, o.TopicPartition, revoke})
			}
		}
		rk.filled = min(len(mine), rk.quota)
	}
	for part := range t.Partitions {
		tp := TopicPartition{t.Name, part}
		if _, ok := owners[tp]; ok {
			continue
		}
		var best *rank
		for _, rk := range ranks {
			if rk.filled >= rk.quota {
				continue
			}
			if best == nil {
				best = rk
				continue
			}
			if c := cmp.Or(compareBool(!t.local(part, rk.m.Node), !t.local(part, best.m.Node)), cmp.Compare(best.quota-best.filled, rk.quota-rk.filled)); c < 0 {
				best = rk
			}
		}
		if best == nil {
			continue // cannot happen: the quotas add up to the partitions
		}
		best.filled++
		out = append(out, change{best.m.ID, tp, grant})
	}
	return out
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// tieBreak is a fixed hash of topic and member (FNV-1a, the same on every
// node and release).
func tieBreak(topic, member string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write([]byte(member))
	return h.Sum64()
}

// rebalance applies the assignment rule at time at. When it changes
// anything, or force is set, the group gets the next generation first and the
// grants and revocations carry the new generation. It reports whether the
// generation grew.
func (g *group) rebalance(at int64, force bool) bool {
	changes := g.plan()
	if len(changes) == 0 && !force {
		return false
	}
	*g.lastGen++
	g.generation = *g.lastGen
	for _, ch := range changes {
		m, _, _ := g.member(ch.member)
		switch ch.kind {
		case grant:
			i, _ := m.ownedIndex(ch.tp)
			m.Owned = slices.Insert(m.Owned, i, Owned{TopicPartition: ch.tp, GrantedGen: g.generation})
		case revoke:
			i, _ := m.ownedIndex(ch.tp)
			o := &m.Owned[i]
			o.Revoking, o.RevokeGen, o.RevokeDeadlineMs = true, g.generation, at+m.RevokeTimeoutMs
		case cancel:
			i, _ := m.ownedIndex(ch.tp)
			o := &m.Owned[i]
			o.Revoking, o.RevokeGen, o.RevokeDeadlineMs = false, 0, 0
		}
	}
	return true
}

// pruneTopics drops what the group knows of topics no member subscribes to
// or owns a partition of.
func (g *group) pruneTopics() {
	g.topics = slices.DeleteFunc(g.topics, func(t Topic) bool {
		for _, m := range g.members {
			if m.subscribes(t.Name) {
				return false
			}
			for _, o := range m.Owned {
				if o.Topic == t.Name {
					return false
				}
			}
		}
		return true
	})
}
