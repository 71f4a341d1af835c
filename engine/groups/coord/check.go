package coord

import (
	"fmt"
	"slices"
)

// check verifies every invariant a state reached through Apply holds.
// DecodeState runs it on what it reads; the model test after every command.
func (s *State) check() error {
	if len(s.names) > MaxGroups || len(s.groups) != len(s.names) {
		return fmt.Errorf("%d groups indexed, %d named (limit %d, MaxGroups)", len(s.groups), len(s.names), MaxGroups)
	}
	for i, name := range s.names {
		if i > 0 && name <= s.names[i-1] {
			return fmt.Errorf("group %q out of order", name)
		}
		g, ok := s.groups[name]
		if !ok || g.name != name {
			return fmt.Errorf("group %q indexed under another name", name)
		}
		if g.generation > s.lastGen || g.lastGen != &s.lastGen {
			return fmt.Errorf("group %q: generation %d above the last generation %d, or not drawn from the state's counter", name, g.generation, s.lastGen)
		}
		if err := g.check(); err != nil {
			return fmt.Errorf("group %q: %v", name, err)
		}
	}
	return nil
}

func (g *group) check() error {
	if !validName(g.name) {
		return invalid("group name", g.name, allowedNames)
	}
	if g.empty() {
		return fmt.Errorf("no members and no positions, yet kept")
	}
	if len(g.members) > MaxMembersPerGroup || len(g.topics) > MaxTopicsPerGroup || len(g.positions) > MaxPositionsPerGroup {
		return fmt.Errorf("%d members, %d topics, %d positions: past MaxMembersPerGroup, MaxTopicsPerGroup or MaxPositionsPerGroup", len(g.members), len(g.topics), len(g.positions))
	}
	for i, t := range g.topics {
		if i > 0 && t.Name <= g.topics[i-1].Name {
			return fmt.Errorf("topic %q out of order", t.Name)
		}
		if err := validateTopic(t); err != nil {
			return err
		}
	}
	used := map[string]bool{}
	owners := map[TopicPartition]string{}
	for i, m := range g.members {
		if i > 0 && m.ID <= g.members[i-1].ID {
			return fmt.Errorf("member %q out of order", m.ID)
		}
		if !validPrintable(m.ID, MaxMemberIDBytes) || !validPrintable(m.Session, MaxSessionBytes) {
			return fmt.Errorf("member %q: bad id or session %q", m.ID, m.Session)
		}
		if m.LastHeartbeatMs < 0 || m.SessionTimeoutMs < MinSessionTimeoutMs || m.SessionTimeoutMs > MaxSessionTimeoutMs ||
			m.RevokeTimeoutMs < MinRevokeTimeoutMs || m.RevokeTimeoutMs > MaxRevokeTimeoutMs {
			return fmt.Errorf("member %q: heartbeat %d ms, session timeout %d ms, revoke timeout %d ms out of range", m.ID, m.LastHeartbeatMs, m.SessionTimeoutMs, m.RevokeTimeoutMs)
		}
		if len(m.Topics) == 0 || len(m.Topics) > MaxTopicsPerMember {
			return fmt.Errorf("member %q subscribes to %d topics", m.ID, len(m.Topics))
		}
		for j, name := range m.Topics {
			if j > 0 && name <= m.Topics[j-1] {
				return fmt.Errorf("member %q: topic %q out of order", m.ID, name)
			}
			if _, ok := g.topic(name); !ok {
				return fmt.Errorf("member %q subscribes to topic %q the group does not know", m.ID, name)
			}
			used[name] = true
		}
		for j, o := range m.Owned {
			if j > 0 && compareTP(o.TopicPartition, m.Owned[j-1].TopicPartition) <= 0 {
				return fmt.Errorf("member %q: %s/%d out of order", m.ID, o.Topic, o.Partition)
			}
			t, ok := g.topic(o.Topic)
			if !ok || o.Partition < 0 || o.Partition >= t.Partitions {
				return fmt.Errorf("member %q owns %s/%d, not a partition the group knows", m.ID, o.Topic, o.Partition)
			}
			used[o.Topic] = true
			if other, dup := owners[o.TopicPartition]; dup {
				return fmt.Errorf("%s/%d owned by %q and %q", o.Topic, o.Partition, other, m.ID)
			}
			owners[o.TopicPartition] = m.ID
			if o.GrantedGen < 1 || o.GrantedGen > g.generation {
				return fmt.Errorf("member %q got %s/%d in generation %d, not between 1 and the group's %d", m.ID, o.Topic, o.Partition, o.GrantedGen, g.generation)
			}
			if o.Revoking && (o.RevokeGen <= o.GrantedGen || o.RevokeGen > g.generation) {
				return fmt.Errorf("member %q: %s/%d revoked in generation %d, not after its grant (%d) and up to the group's %d", m.ID, o.Topic, o.Partition, o.RevokeGen, o.GrantedGen, g.generation)
			}
			if !o.Revoking && (o.RevokeGen != 0 || o.RevokeDeadlineMs != 0) {
				return fmt.Errorf("member %q: %s/%d not revoking, yet a revocation generation or deadline", m.ID, o.Topic, o.Partition)
			}
		}
	}
	for _, t := range g.topics {
		if !used[t.Name] {
			return fmt.Errorf("topic %q kept though no member subscribes to it or owns a partition of it", t.Name)
		}
	}
	for tp, p := range g.positions {
		if err := validateTP(tp); err != nil {
			return err
		}
		if err := validatePosition(p); err != nil {
			return fmt.Errorf("position on %s/%d: %v", tp.Topic, tp.Partition, err)
		}
	}
	if changes := g.plan(); len(changes) > 0 {
		return fmt.Errorf("the assignment rule would still change %d things (first: %+v)", len(changes), changes[0])
	}
	return nil
}

// settled reports whether no partition of the group is being revoked.
func (g *group) settled() bool {
	for _, m := range g.members {
		if slices.ContainsFunc(m.Owned, func(o Owned) bool { return o.Revoking }) {
			return false
		}
	}
	return true
}
