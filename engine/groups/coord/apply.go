package coord

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Command is one change to the State, the value of one record of the
// offsets topic. Group and AtMs are set on every command; exactly one of
// the others is set.
type Command struct {
	// Group is the consumer group the command is about.
	Group string
	// AtMs is the coordinator's clock when it proposed the command, in ms
	// (logical time: the state machine never reads a clock). Heartbeat
	// times and revocation deadlines are taken from it; Expire is checked
	// against it.
	AtMs int64

	Join       *Join
	Heartbeat  *Heartbeat
	Leave      *Leave
	Expire     *Expire
	RevokeDone *RevokeDone
	Commit     *Commit
	Reset      *ResetPositions
	// DropTopic is about every group (Group is empty).
	DropTopic *DropTopic
	// Checkpoint is a chunk of the whole state (Group is empty); applying
	// it changes nothing (checkpoint.go).
	Checkpoint *Checkpoint
}

// Join adds a member to the group or updates one. A new member id is a new
// member. The same member with the same session is the same incarnation
// again (a retried Join, or a changed subscription): its topics and
// timeouts are updated, it stops yielding and counts as heard from. The
// same member with another session is a restart: the member keeps the
// partitions it owns (no partition moves because a sidecar restarted
// within its session timeout), re-granted in a new generation so that what
// the previous incarnation still sends is fenced, and the revocations it
// was asked for complete at once (the new incarnation has delivered
// nothing).
type Join struct {
	Member  string
	Session string
	// Node is the cluster node the member's sidecar runs on; 0 for a
	// sidecar that holds no replicas (storage off), which then has no
	// preference for local reads.
	Node NodeID
	// Topics are the topics the member subscribes to, with their partition
	// counts and, for the preference for local reads, the nodes holding
	// each partition's replicas (what engine/meta says when the member
	// joins). A partition count other than the one the group knows is
	// refused (ErrTopicConflict); replica lists replace what the group knew.
	Topics []Topic
	// SessionTimeoutMs and RevokeTimeoutMs (0: the defaults).
	SessionTimeoutMs int64
	RevokeTimeoutMs  int64
	// Consumers are the apps connected to the member's sidecar that take
	// the subscription (Member.Consumers).
	Consumers uint32
}

// Heartbeat says the member is alive at AtMs, and whether it yields: gives
// its partitions up (its app is not connected) and takes none until a
// Heartbeat or Join without Yield; and whether it is degraded: its
// breakers have held its deliveries past their threshold, so it gives its
// partitions to members that are not, and takes partitions only when every
// member that could take them is degraded too (then the flag counts for
// nothing: a downstream down for everyone does not empty the group).
// Consumers is the member's count of connected apps as of the heartbeat
// (Member.Consumers); a change of it alone moves no partition.
type Heartbeat struct {
	Member    string
	Session   string
	Yield     bool
	Degraded  bool
	Consumers uint32
}

// Leave removes a member (a sidecar stopping: it has drained and committed
// first). Its partitions go to the other members at once.
type Leave struct {
	Member  string
	Session string
}

// Expire removes a member whose session ended (not heard from for its
// session timeout at AtMs) or that has not answered a revocation by its
// deadline. Its partitions go to the other members at once; what it still
// delivers is fenced by the generation. An Expire the state does not
// justify (the member was heard from since the driver looked) is refused
// with ErrNotExpired.
type Expire struct {
	Member string
}

// RevokeDone says the member has stopped delivering the partitions, its
// in-flight deliveries of them are finished or handed back, and their
// positions are committed. They go to their new owners at once. Refused
// (ErrNotRevoking) unless every partition named is being revoked from the
// member and Generation is at least the generation of each revocation.
type RevokeDone struct {
	Member     string
	Generation uint64
	Partitions []TopicPartition
}

// Commit records the group's committed position on a partition. Refused
// (ErrFenced) unless the member owns the partition (a partition being
// revoked included) and Generation is between the generation it got the
// partition in and the group's generation. The committed position never
// moves backwards: the new position is the old one and the committed one
// together (every offset finished in either is finished), so a commit
// behind the committed position changes nothing and is not an error (a
// retried or reordered commit).
type Commit struct {
	Member     string
	Generation uint64
	TopicPartition
	Position Position
}

// ResetPositions sets the group's committed positions on partitions of one
// topic to exactly the offsets given, forwards or backwards: an operator's
// offset reset, the one command that moves a position back. Refused
// (ErrGroupActive) while a member owns a partition of the topic (one being
// revoked included): the group's apps must be stopped on every sidecar
// first, so that their sidecars yield the partitions and nothing commits
// past the reset. A group the coordinator does not know is created with
// these positions (a group prepared before its apps start).
type ResetPositions struct {
	Topic string
	// Next is where each partition starts, by partition; nothing above it
	// counts as finished.
	Next []PartitionNext
}

// DropTopic forgets a topic the cluster deleted, in every group of this
// coordinator (Group is empty): the committed positions on its partitions
// and what the groups know of it (its partition count and replicas), so
// that a topic created again under the name starts with no positions and
// may have another partition count. Groups left with nothing are dropped.
// Refused (ErrGroupActive, naming the group and the member) while a member
// of any group subscribes to the topic or owns a partition of it: the
// topic is in use. A topic no group knows changes nothing.
type DropTopic struct {
	Topic string
}

// PartitionNext is one partition's new position.
type PartitionNext struct {
	Partition int32
	Next      int64
}

// ExpireReason says why an Expire was accepted.
type ExpireReason int

// Reasons for an expiry.
const (
	NotExpired ExpireReason = iota
	// SessionEnded: not heard from for the session timeout.
	SessionEnded
	// RevokeTimedOut: a revocation was not answered by its deadline.
	RevokeTimedOut
)

func (r ExpireReason) String() string {
	switch r {
	case SessionEnded:
		return "session ended"
	case RevokeTimedOut:
		return "revocation timed out"
	default:
		return "not expired"
	}
}

// Result is what applying a command did.
type Result struct {
	// Err is a refusal: the command changed nothing. Refusals depend only
	// on the state and the command, so every replica refuses the same
	// commands with the same error.
	Err error
	// Generation is the group's generation after the command.
	Generation uint64
	// Rebalanced: the assignment changed (the generation grew).
	Rebalanced bool
	// Expired says why an Expire removed its member.
	Expired ExpireReason
}

// Refusals. Every error Apply returns matches one of these with errors.Is,
// and its text says what was wrong and what to do.
var (
	// ErrInvalid: a value breaks a rule (name, range, size); an
	// *InvalidError says which.
	ErrInvalid = errors.New("coord: invalid command")
	// ErrLimit: the command would pass one of the named limits.
	ErrLimit = errors.New("coord: limit reached")
	// ErrUnknownGroup: no such group.
	ErrUnknownGroup = errors.New("coord: unknown group")
	// ErrUnknownMember: the group has no such member (never joined, left or
	// expired): it must Join again.
	ErrUnknownMember = errors.New("coord: unknown member")
	// ErrStaleSession: a command from an earlier incarnation of a member.
	ErrStaleSession = errors.New("coord: stale session")
	// ErrTopicConflict: a Join says a topic has another partition count
	// than the group knows.
	ErrTopicConflict = errors.New("coord: topic conflict")
	// ErrNotExpired: an Expire for a member heard from since, with no
	// revocation past its deadline.
	ErrNotExpired = errors.New("coord: member not expired")
	// ErrNotRevoking: a RevokeDone for a partition not being revoked from
	// the member, or with a generation before the revocation.
	ErrNotRevoking = errors.New("coord: partition not being revoked")
	// ErrFenced: a Commit from a member that does not own the partition in
	// that generation.
	ErrFenced = errors.New("coord: fenced")
	// ErrGroupActive: a ResetPositions while members own partitions of the
	// topic.
	ErrGroupActive = errors.New("coord: group active")
)

// shape checks that exactly one command is set.
func (c Command) shape() error {
	n := 0
	for _, set := range []bool{c.Join != nil, c.Heartbeat != nil, c.Leave != nil, c.Expire != nil, c.RevokeDone != nil, c.Commit != nil, c.Reset != nil, c.Checkpoint != nil, c.DropTopic != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: a command sets exactly one of Join, Heartbeat, Leave, Expire, RevokeDone, Commit, Reset, Checkpoint, DropTopic; this one sets %d (a command from a newer release this node does not know decodes as none: upgrade this node)", ErrInvalid, n)
	}
	return nil
}

// Apply applies one committed command. A refused command (Result.Err)
// leaves the state unchanged.
func (s *State) Apply(c Command) Result {
	if err := c.Validate(); err != nil {
		return Result{Err: err}
	}
	if c.Checkpoint != nil {
		return Result{}
	}
	if c.DropTopic != nil {
		return s.applyDropTopic(c.DropTopic.Topic)
	}
	if c.Join != nil {
		return s.applyJoin(c.Group, c.AtMs, *c.Join)
	}
	if c.Reset != nil {
		return s.applyReset(c.Group, *c.Reset)
	}
	g, ok := s.groups[c.Group]
	if !ok {
		return Result{Err: fmt.Errorf("%w %q: it has no members and no committed positions; a member must Join first", ErrUnknownGroup, c.Group)}
	}
	var r Result
	switch {
	case c.Heartbeat != nil:
		r = g.applyHeartbeat(c.AtMs, *c.Heartbeat)
	case c.Leave != nil:
		r = g.applyLeave(c.AtMs, *c.Leave)
	case c.Expire != nil:
		r = g.applyExpire(c.AtMs, *c.Expire)
	case c.RevokeDone != nil:
		r = g.applyRevokeDone(c.AtMs, *c.RevokeDone)
	default:
		r = g.applyCommit(*c.Commit)
	}
	if r.Err == nil {
		g.pruneTopics()
		s.dropIfEmpty(g)
	}
	r.Generation = g.generation
	return r
}

func (s *State) applyDropTopic(topic string) Result {
	for _, name := range s.names {
		g := s.groups[name]
		for _, m := range g.members {
			if m.subscribes(topic) {
				return Result{Err: fmt.Errorf("%w: member %q of group %q subscribes to topic %q: stop the group's apps that read it (or remove the subscription from their sidecars' config) first",
					ErrGroupActive, m.ID, name, topic)}
			}
			for _, o := range m.Owned {
				if o.Topic == topic {
					return Result{Err: fmt.Errorf("%w: member %q of group %q owns %s/%d: stop the group's apps that read it first", ErrGroupActive, m.ID, name, topic, o.Partition)}
				}
			}
		}
	}
	var emptied []*group
	for _, name := range s.names {
		g := s.groups[name]
		for tp := range g.positions {
			if tp.Topic == topic {
				delete(g.positions, tp)
			}
		}
		g.topics = slices.DeleteFunc(g.topics, func(t Topic) bool { return t.Name == topic })
		if g.empty() {
			emptied = append(emptied, g)
		}
	}
	for _, g := range emptied {
		s.dropIfEmpty(g)
	}
	return Result{}
}

func (s *State) applyReset(name string, r ResetPositions) Result {
	g, ok := s.groups[name]
	if !ok && len(s.names) >= MaxGroups {
		return Result{Err: fmt.Errorf("%w: this coordinator holds %d groups (MaxGroups): it cannot take group %q; give the offsets topic more partitions, or delete groups no longer used", ErrLimit, len(s.names), name)}
	}
	if ok {
		for _, m := range g.members {
			for _, o := range m.Owned {
				if o.Topic == r.Topic {
					return Result{Err: fmt.Errorf("%w: member %q of group %q owns %s/%d (generation %d): stop the group's apps on every sidecar (their sidecars then give the partitions up), then reset",
						ErrGroupActive, m.ID, name, o.Topic, o.Partition, g.generation)}
				}
			}
		}
		if t, known := g.topic(r.Topic); known {
			for _, pn := range r.Next {
				if pn.Partition >= t.Partitions {
					return Result{Err: fmt.Errorf("%w: group %q knows topic %q with %d partitions, so it has no partition %d", ErrTopicConflict, name, r.Topic, t.Partitions, pn.Partition)}
				}
			}
		}
		added := 0
		for _, pn := range r.Next {
			if _, had := g.positions[TopicPartition{r.Topic, pn.Partition}]; !had {
				added++
			}
		}
		if len(g.positions)+added > MaxPositionsPerGroup {
			return Result{Err: fmt.Errorf("%w: group %q would keep committed positions on %d partitions, more than %d (MaxPositionsPerGroup)", ErrLimit, name, len(g.positions)+added, MaxPositionsPerGroup)}
		}
	} else {
		g = s.addGroup(name)
	}
	for _, pn := range r.Next {
		g.positions[TopicPartition{r.Topic, pn.Partition}] = Position{Next: pn.Next}
	}
	return Result{Generation: g.generation}
}

func (s *State) applyJoin(name string, at int64, j Join) Result {
	g, ok := s.groups[name]
	if !ok && len(s.names) >= MaxGroups {
		return Result{Err: fmt.Errorf("%w: this coordinator holds %d groups (MaxGroups): it cannot take group %q; give the offsets topic more partitions, or delete groups no longer used", ErrLimit, len(s.names), name)}
	}
	var m *Member
	at0 := 0
	if ok {
		m, at0, _ = g.member(j.Member)
	}
	if m == nil && ok && len(g.members) >= MaxMembersPerGroup {
		return Result{Err: fmt.Errorf("%w: group %q has %d members (MaxMembersPerGroup): member %q cannot join; run fewer replicas of the app, or split it into groups", ErrLimit, name, len(g.members), j.Member)}
	}
	// The topics: partition counts must agree with what the group knows.
	newTopics := 0
	if ok {
		for _, t := range j.Topics {
			known, found := g.topic(t.Name)
			if !found {
				newTopics++
				continue
			}
			if known.Partitions != t.Partitions {
				return Result{Err: fmt.Errorf("%w: group %q knows topic %q with %d partitions, member %q says %d; the member's view of the cluster is stale: refresh it and join again",
					ErrTopicConflict, name, t.Name, known.Partitions, j.Member, t.Partitions)}
			}
		}
		if len(g.topics)+newTopics > MaxTopicsPerGroup {
			return Result{Err: fmt.Errorf("%w: group %q's members subscribe to %d topics and member %q adds %d, past %d (MaxTopicsPerGroup); use fewer topics in one group",
				ErrLimit, name, len(g.topics), j.Member, newTopics, MaxTopicsPerGroup)}
		}
	}
	if !ok {
		g = s.addGroup(name)
	}
	for _, t := range j.Topics {
		t = cloneTopic(t)
		if known, found := g.topic(t.Name); found {
			if t.Replicas != nil {
				known.Replicas = t.Replicas
			}
			continue
		}
		i, _ := slices.BinarySearchFunc(g.topics, t.Name, func(o Topic, name string) int { return strings.Compare(o.Name, name) })
		g.topics = slices.Insert(g.topics, i, t)
	}
	topics := make([]string, 0, len(j.Topics))
	for _, t := range j.Topics {
		topics = append(topics, t.Name)
	}
	slices.Sort(topics)
	restart := m != nil && m.Session != j.Session
	if m == nil {
		m = &Member{ID: j.Member}
		g.members = slices.Insert(g.members, at0, m)
	}
	m.Session, m.Node, m.Topics, m.Yield, m.Degraded, m.Consumers = j.Session, j.Node, topics, false, false, j.Consumers
	m.LastHeartbeatMs = max(m.LastHeartbeatMs, at)
	m.SessionTimeoutMs = cmpOr(j.SessionTimeoutMs, DefaultSessionTimeoutMs)
	m.RevokeTimeoutMs = cmpOr(j.RevokeTimeoutMs, DefaultRevokeTimeoutMs)
	r := Result{}
	if !restart {
		r.Rebalanced = g.rebalance(at, false)
	} else {
		// The previous incarnation is gone: what it was giving up is free
		// now, and what the rule takes from the new one it gives up at
		// once (it has delivered nothing).
		for force := true; ; force = false {
			m.Owned = slices.DeleteFunc(m.Owned, func(o Owned) bool { return o.Revoking })
			if g.rebalance(at, force) {
				r.Rebalanced = true
			}
			if !slices.ContainsFunc(m.Owned, func(o Owned) bool { return o.Revoking }) {
				break
			}
		}
		for i := range m.Owned {
			m.Owned[i].GrantedGen = g.generation
		}
	}
	g.pruneTopics()
	r.Generation = g.generation
	return r
}

func cmpOr(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// session finds a member and checks its session.
func (g *group) session(id, session string) (*Member, int, error) {
	m, i, ok := g.member(id)
	if !ok {
		return nil, 0, fmt.Errorf("%w %q in group %q: it left or was expired (not heard from for its session timeout, or a revocation unanswered); join again", ErrUnknownMember, id, g.name)
	}
	if m.Session != session {
		return nil, 0, fmt.Errorf("%w: member %q of group %q runs as session %q now, not %q: a newer incarnation joined; this one must stop", ErrStaleSession, id, g.name, m.Session, session)
	}
	return m, i, nil
}

func (g *group) applyHeartbeat(at int64, h Heartbeat) Result {
	m, _, err := g.session(h.Member, h.Session)
	if err != nil {
		return Result{Err: err}
	}
	m.LastHeartbeatMs = max(m.LastHeartbeatMs, at)
	m.Consumers = h.Consumers
	if m.Yield == h.Yield && m.Degraded == h.Degraded {
		return Result{}
	}
	m.Yield, m.Degraded = h.Yield, h.Degraded
	return Result{Rebalanced: g.rebalance(at, false)}
}

func (g *group) applyLeave(at int64, l Leave) Result {
	_, i, err := g.session(l.Member, l.Session)
	if err != nil {
		return Result{Err: err}
	}
	return g.remove(at, i)
}

// remove drops the member at index i; its partitions are free at once.
func (g *group) remove(at int64, i int) Result {
	had := len(g.members[i].Owned) > 0
	g.members = slices.Delete(g.members, i, i+1)
	changed := g.rebalance(at, had)
	return Result{Rebalanced: changed}
}

func (g *group) applyExpire(at int64, e Expire) Result {
	m, i, ok := g.member(e.Member)
	if !ok {
		return Result{Err: fmt.Errorf("%w %q in group %q: it left or was expired already; nothing to do", ErrUnknownMember, e.Member, g.name)}
	}
	reason := NotExpired
	if m.SessionEndsMs() <= at {
		reason = SessionEnded
	} else if d, ok := m.RevokeDeadlineMs(); ok && d <= at {
		reason = RevokeTimedOut
	}
	if reason == NotExpired {
		return Result{Err: fmt.Errorf("%w: member %q of group %q was heard from at %d ms, its session ends at %d ms, and it has no revocation past its deadline at %d ms; nothing to do (the driver looked before it was heard from)",
			ErrNotExpired, m.ID, g.name, m.LastHeartbeatMs, m.SessionEndsMs(), at)}
	}
	r := g.remove(at, i)
	r.Expired = reason
	return r
}

func (g *group) applyRevokeDone(at int64, d RevokeDone) Result {
	m, _, ok := g.member(d.Member)
	if !ok {
		return Result{Err: fmt.Errorf("%w %q in group %q: it was expired, and its partitions went to others already; join again", ErrUnknownMember, d.Member, g.name)}
	}
	if d.Generation > g.generation {
		return Result{Err: fmt.Errorf("%w: generation %d is ahead of group %q's generation %d; use the generation of the member's assignment", ErrInvalid, d.Generation, g.name, g.generation)}
	}
	for _, tp := range d.Partitions {
		i, ok := m.ownedIndex(tp)
		if !ok || !m.Owned[i].Revoking {
			return Result{Err: fmt.Errorf("%w: member %q of group %q is not asked to revoke %s/%d (generation %d); fetch the assignment again and keep delivering what it still owns",
				ErrNotRevoking, m.ID, g.name, tp.Topic, tp.Partition, g.generation)}
		}
		if o := m.Owned[i]; d.Generation < o.RevokeGen {
			return Result{Err: fmt.Errorf("%w: member %q of group %q was asked to revoke %s/%d in generation %d, after generation %d of this RevokeDone; fetch the assignment again",
				ErrNotRevoking, m.ID, g.name, tp.Topic, tp.Partition, o.RevokeGen, d.Generation)}
		}
	}
	m.Owned = slices.DeleteFunc(m.Owned, func(o Owned) bool { return slices.Contains(d.Partitions, o.TopicPartition) })
	return Result{Rebalanced: g.rebalance(at, true)}
}

func (g *group) applyCommit(c Commit) Result {
	m, _, ok := g.member(c.Member)
	if !ok {
		return Result{Err: fmt.Errorf("%w: member %q of group %q is not a member (it left or was expired) and cannot commit %s/%d; join again and deliver from the committed position",
			ErrFenced, c.Member, g.name, c.Topic, c.Partition)}
	}
	i, ok := m.ownedIndex(c.TopicPartition)
	if !ok {
		return Result{Err: fmt.Errorf("%w: member %q of group %q does not own %s/%d (generation %d) and cannot commit it; stop delivering it",
			ErrFenced, c.Member, g.name, c.Topic, c.Partition, g.generation)}
	}
	if o := m.Owned[i]; c.Generation < o.GrantedGen || c.Generation > g.generation {
		return Result{Err: fmt.Errorf("%w: member %q of group %q got %s/%d in generation %d (the group is at %d), so a commit of generation %d is not its own; stop delivering what that generation fetched",
			ErrFenced, c.Member, g.name, c.Topic, c.Partition, o.GrantedGen, g.generation, c.Generation)}
	}
	old, had := g.positions[c.TopicPartition]
	if !had && len(g.positions) >= MaxPositionsPerGroup {
		return Result{Err: fmt.Errorf("%w: group %q has committed positions on %d partitions (MaxPositionsPerGroup); delete positions of topics it no longer reads",
			ErrLimit, g.name, len(g.positions))}
	}
	next := merge(old, c.Position) // with nothing committed, old is zero: next is the commit's position
	if len(next.Done) > MaxDonePerPosition {
		return Result{Err: fmt.Errorf("%w: the committed position of group %q on %s/%d and this commit together finish %d offsets above %d, more than %d (MaxDonePerPosition); commit a position that includes the committed one's finished offsets",
			ErrLimit, g.name, c.Topic, c.Partition, len(next.Done), next.Next, MaxDonePerPosition)}
	}
	g.positions[c.TopicPartition] = next
	return Result{}
}
