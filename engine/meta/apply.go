package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Command is one change to the State, the value of one record of group 0's
// log. Exactly one field is set.
type Command struct {
	Init             *Init
	AddNode          *AddNode
	SetNodeAddr      *SetNodeAddr
	CreateTopic      *CreateTopic
	AlterTopic       *AlterTopic
	MoveReplicas     *MoveReplicas
	FinishMove       *FinishMove
	SetNodeDown      *SetNodeDown
	DecommissionNode *DecommissionNode
	RemoveNode       *RemoveNode
	DeleteTopic      *DeleteTopic
	DropDamaged      *DropDamaged
	FinalizeVersion  *FinalizeVersion
}

// DropDamaged takes node Node's replica of the partition of Group out of
// the group because its data is damaged (its node found corruption and
// quarantined it): the partition moves to its other replicas (a move with
// one replica fewer: the damaged one never voted again, so no quorum is
// lost), after which NextMove gives the partition a new copy on the least
// loaded node — often the same one, as a new member of the group that
// copies the leader's log. Refused (ErrInvalid) when the node holds no
// replica of it, while the partition moves, and when it is the partition's
// only replica (nothing to copy from: spoold repair, docs/operations.md).
type DropDamaged struct {
	Group uint64
	Node  NodeID
}

// DeleteTopic removes a topic, pending or placed (a move under way
// included): every node stops its replicas of the topic's partitions and
// deletes their data. The partitions' group ids are never given again
// (NextGroupID does not go back), so a topic created again under the name
// gets new groups and starts empty. Internal topics are refused
// (ErrInvalid).
type DeleteTopic struct{ Name string }

// DecommissionNode marks a node leaving: NextMove moves its replicas to
// other nodes and it stops voting in the controller. Refused when the
// other nodes (not leaving) would be fewer than a topic's replication
// factor: its replicas would have nowhere to go.
type DecommissionNode struct{ ID NodeID }

// RemoveNode takes a leaving node that holds no replica (nor is getting
// one) out of the cluster. Its id is never given again; the node, if it
// runs, stops with an error saying so.
type RemoveNode struct{ ID NodeID }

// MoveReplicas starts a replica move of a partition's group (or redirects
// the one under way): Replicas becomes its Target, Moved is set. The target
// is ReplicationFactor distinct nodes of the cluster. A target equal to the
// current replicas ends a move under way without changing anything else;
// with no move under way it is a no-op.
//
// Pin marks an operator's move (spool cluster move): the partition becomes
// Pinned, so that NextMove's balancing leaves it where the operator put it,
// and a target naming a node that is down or leaving is refused
// (ErrNodeUnavailable: NextMove would move that replica away at once).
type MoveReplicas struct {
	Group    uint64
	Replicas []NodeID
	Pin      bool
}

// FinishMove ends a move: the group's membership is its target. Refused
// (ErrStaleMove) unless Replicas equals the partition's Target: a move
// redirected after the leader looked must not finish with the old target.
type FinishMove struct {
	Group    uint64
	Replicas []NodeID
}

// SetNodeDown marks a node down (unreachable for the dead-node timeout) or
// up again.
type SetNodeDown struct {
	ID   NodeID
	Down bool
}

// Init names the cluster: the first command of every cluster (every other
// command is refused before it); refused once the cluster has an id.
type Init struct{ ClusterID string }

// AddNode registers a node that asked to join. A new token gets the next
// node id (1, 2, ...; never reused); a token already known is a retried
// join and gets the same id again (its address updated if it changed).
// Pending topics the new node makes placeable are placed.
type AddNode struct{ Addr, Token, Identity string }

// SetNodeAddr changes the address peers dial for a known node.
type SetNodeAddr struct {
	ID   NodeID
	Addr string
}

// CreateTopic declares a topic and places its partitions if the cluster has
// at least ReplicationFactor nodes (else the topic is pending). The same
// name with the same partitions and replication factor again updates the
// retention only; other partitions or another replication factor, or a
// name differing only in case, is refused (ErrTopicConflict).
type CreateTopic struct{ Spec TopicSpec }

// AlterTopic changes a topic's retention.
type AlterTopic struct {
	Name                           string
	RetentionAgeMs, RetentionBytes int64
}

// Result is what applying a command did.
type Result struct {
	// NodeID is the node an AddNode added or found again (0 otherwise).
	NodeID NodeID
	// Err is a refusal: the command changed nothing. Refusals depend only
	// on the state and the command, so every node refuses the same commands
	// with the same error.
	Err error
}

// Refusals. Every error Apply returns matches one of these with errors.Is,
// and its text says what was wrong and what to do.
var (
	// ErrInvalid: a value breaks a rule (name, range, address syntax); an
	// *InvalidError says which.
	ErrInvalid = errors.New("meta: invalid command")
	// ErrNotInitialized: a command other than Init before Init.
	ErrNotInitialized = errors.New("meta: the cluster has no id yet")
	// ErrAlreadyInitialized: Init when the cluster has an id.
	ErrAlreadyInitialized = errors.New("meta: the cluster already has an id")
	// ErrLimit: the command would pass one of the named limits.
	ErrLimit = errors.New("meta: limit reached")
	// ErrUnknownNode: a node id the cluster does not have.
	ErrUnknownNode = errors.New("meta: unknown node")
	// ErrUnknownTopic: a topic the cluster does not have.
	ErrUnknownTopic = errors.New("meta: unknown topic")
	// ErrTopicConflict: a CreateTopic disagrees with the topic of that name;
	// a *TopicConflictError says how.
	ErrTopicConflict = errors.New("meta: topic conflict")
	// ErrUnknownGroup: a raft group no partition has.
	ErrUnknownGroup = errors.New("meta: unknown partition group")
	// ErrStaleMove: a FinishMove for a target the partition no longer has.
	ErrStaleMove = errors.New("meta: stale replica move")
	// ErrNodeInUse: RemoveNode of a node not leaving or still holding
	// replicas.
	ErrNodeInUse = errors.New("meta: node still in use")
	// ErrNodeUnavailable: an operator's move (MoveReplicas with Pin) to a
	// node that is down or leaving.
	ErrNodeUnavailable = errors.New("meta: node down or leaving")
)

// TopicConflictError says how a CreateTopic disagrees with an existing
// topic. It matches ErrTopicConflict with errors.Is.
type TopicConflictError struct {
	// Existing is the topic as it is.
	Existing TopicSpec
	// Requested is what the command asked for.
	Requested TopicSpec
}

func (e *TopicConflictError) Error() string {
	if e.Existing.Name != e.Requested.Name {
		return fmt.Sprintf("meta: topic %q conflicts with the existing topic %q: names are unique ignoring case; use %q or another name",
			e.Requested.Name, e.Existing.Name, e.Existing.Name)
	}
	return fmt.Sprintf("meta: topic %q exists with %d partitions and replication factor %d, not %d and %d: a topic's partitions and replication factor cannot be changed by creating it again; declare it as it is, or use another name",
		e.Existing.Name, e.Existing.Partitions, e.Existing.ReplicationFactor, e.Requested.Partitions, e.Requested.ReplicationFactor)
}

// Is makes errors.Is(err, ErrTopicConflict) true.
func (e *TopicConflictError) Is(target error) bool { return target == ErrTopicConflict }

// shape checks that exactly one command is set.
func (c Command) shape() error {
	n := 0
	for _, set := range []bool{c.Init != nil, c.AddNode != nil, c.SetNodeAddr != nil, c.CreateTopic != nil, c.AlterTopic != nil,
		c.MoveReplicas != nil, c.FinishMove != nil, c.SetNodeDown != nil, c.DecommissionNode != nil, c.RemoveNode != nil, c.DeleteTopic != nil, c.DropDamaged != nil, c.FinalizeVersion != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: a command sets exactly one of Init, AddNode, SetNodeAddr, CreateTopic, AlterTopic, MoveReplicas, FinishMove, SetNodeDown, DecommissionNode, RemoveNode, DeleteTopic, DropDamaged, FinalizeVersion; this one sets %d (a command from a newer release this node does not know decodes as none: upgrade this node)", ErrInvalid, n)
	}
	return nil
}

// Apply applies one committed command. A refused command (Result.Err)
// leaves the state unchanged.
func (s *State) Apply(c Command) Result {
	if err := c.Validate(); err != nil {
		return Result{Err: err}
	}
	if c.Init != nil {
		if s.clusterID != "" {
			return Result{Err: fmt.Errorf("%w %q: Init is the first command of a cluster only; nothing to do", ErrAlreadyInitialized, s.clusterID)}
		}
		s.clusterID = c.Init.ClusterID
		return Result{}
	}
	if s.clusterID == "" {
		return Result{Err: fmt.Errorf("%w: commit Init with the cluster id first", ErrNotInitialized)}
	}
	switch {
	case c.AddNode != nil:
		return s.applyAddNode(*c.AddNode)
	case c.SetNodeAddr != nil:
		i, ok := s.nodeIndex(c.SetNodeAddr.ID)
		if !ok {
			return Result{Err: fmt.Errorf("%w %d: the cluster has nodes 1 to %d; check the node id", ErrUnknownNode, c.SetNodeAddr.ID, s.nextNode-1)}
		}
		s.nodes[i].Addr = c.SetNodeAddr.Addr
		return Result{}
	case c.CreateTopic != nil:
		return s.applyCreateTopic(c.CreateTopic.Spec)
	case c.MoveReplicas != nil:
		if !c.MoveReplicas.Pin {
			return s.applyMove(*c.MoveReplicas)
		}
		if err := s.checkOperatorMove(*c.MoveReplicas); err != nil {
			return Result{Err: err}
		}
		r := s.applyMove(*c.MoveReplicas)
		if r.Err == nil {
			t, i, _ := s.partitionOf(c.MoveReplicas.Group)
			t.Partitions[i].Pinned = true
		}
		return r
	case c.DeleteTopic != nil:
		return s.applyDeleteTopic(c.DeleteTopic.Name)
	case c.DropDamaged != nil:
		return s.applyDropDamaged(*c.DropDamaged)
	case c.FinalizeVersion != nil:
		return s.applyFinalize(*c.FinalizeVersion)
	case c.FinishMove != nil:
		return s.applyFinishMove(*c.FinishMove)
	case c.SetNodeDown != nil:
		i, ok := s.nodeIndex(c.SetNodeDown.ID)
		if !ok {
			return Result{Err: fmt.Errorf("%w %d: the cluster has nodes 1 to %d; check the node id", ErrUnknownNode, c.SetNodeDown.ID, s.nextNode-1)}
		}
		s.nodes[i].Down = c.SetNodeDown.Down
		return Result{}
	case c.DecommissionNode != nil:
		return s.applyDecommission(c.DecommissionNode.ID)
	case c.RemoveNode != nil:
		id := c.RemoveNode.ID
		n, ok := s.Node(id)
		switch {
		case !ok:
			return Result{Err: fmt.Errorf("%w %d: the cluster has nodes %v; check the node id", ErrUnknownNode, id, s.nodeIDs())}
		case !n.Leaving:
			return Result{Err: fmt.Errorf("%w: node %d is not leaving: decommission it first (its replicas move away), then remove it", ErrNodeInUse, id)}
		case s.Holds(id):
			return Result{Err: fmt.Errorf("%w: node %d still holds replicas: wait until they moved away (spool cluster status)", ErrNodeInUse, id)}
		}
		s.removeNode(id)
		return Result{}
	default:
		a := c.AlterTopic
		t, ok := s.topics[a.Name]
		if !ok {
			return Result{Err: fmt.Errorf("%w %q: create it first (names are case-sensitive)", ErrUnknownTopic, a.Name)}
		}
		t.Spec.RetentionAgeMs, t.Spec.RetentionBytes = a.RetentionAgeMs, a.RetentionBytes
		return Result{}
	}
}

func (s *State) nodeIndex(id NodeID) (int, bool) {
	return slices.BinarySearchFunc(s.nodes, id, func(n Node, id NodeID) int { return cmp.Compare(n.ID, id) })
}

func (s *State) applyAddNode(a AddNode) Result {
	if id, ok := s.byToken[a.Token]; ok {
		i, _ := s.nodeIndex(id)
		if s.nodes[i].Identity != a.Identity {
			// A retried join comes from the node itself: another
			// certificate holding its token must not take its id or move it.
			return Result{Err: fmt.Errorf("%w: the join token is node %d's, whose certificate identity is not the one presented", ErrInvalid, id)}
		}
		s.nodes[i].Addr = a.Addr
		return Result{NodeID: id}
	}
	if len(s.nodes) >= MaxNodes {
		return Result{Err: fmt.Errorf("%w: the cluster has %d nodes (MaxNodes): it cannot take node %s; run fewer, larger nodes", ErrLimit, len(s.nodes), a.Addr)}
	}
	id := s.addNode(a)
	// Place the pending topics this node makes placeable, in name order.
	var reps, leads []int
	for _, name := range s.names {
		t := s.topics[name]
		if t.Pending() && int(t.Spec.ReplicationFactor) <= len(s.nodes) {
			if reps == nil {
				reps, leads = s.loads()
			}
			s.place(t, reps, leads)
		}
	}
	return Result{NodeID: id}
}

func (s *State) applyCreateTopic(spec TopicSpec) Result {
	if name, ok := s.byFold[strings.ToLower(spec.Name)]; ok {
		t := s.topics[name]
		if name != spec.Name || t.Spec.Partitions != spec.Partitions || t.Spec.ReplicationFactor != spec.ReplicationFactor {
			return Result{Err: &TopicConflictError{Existing: t.Spec, Requested: spec}}
		}
		t.Spec.RetentionAgeMs, t.Spec.RetentionBytes = spec.RetentionAgeMs, spec.RetentionBytes
		return Result{}
	}
	if len(s.names) >= MaxTopics {
		return Result{Err: fmt.Errorf("%w: the cluster has %d topics (MaxTopics): it cannot create topic %q; use fewer topics (keys or headers tell messages apart within one)", ErrLimit, len(s.names), spec.Name)}
	}
	if s.total+int(spec.Partitions) > MaxTotalPartitions {
		return Result{Err: fmt.Errorf("%w: the cluster's topics have %d partitions and topic %q asks for %d more, past %d (MaxTotalPartitions); create it with fewer partitions",
			ErrLimit, s.total, spec.Name, spec.Partitions, MaxTotalPartitions)}
	}
	t := &Topic{Spec: spec}
	s.addTopic(t)
	if int(spec.ReplicationFactor) <= len(s.nodes) {
		reps, leads := s.loads()
		s.place(t, reps, leads)
	}
	return Result{}
}

func (s *State) applyMove(m MoveReplicas) Result {
	t, i, ok := s.partitionOf(m.Group)
	if !ok {
		return Result{Err: fmt.Errorf("%w %d: no placed partition has it; check the group id (spool cluster status lists them)", ErrUnknownGroup, m.Group)}
	}
	if len(m.Replicas) != int(t.Spec.ReplicationFactor) {
		return Result{Err: fmt.Errorf("%w: a move of %s/%d (group %d) names %d replicas, want %d (the topic's replication factor)",
			ErrInvalid, t.Spec.Name, i, m.Group, len(m.Replicas), t.Spec.ReplicationFactor)}
	}
	for j, id := range m.Replicas {
		if _, ok := s.Node(id); !ok {
			return Result{Err: fmt.Errorf("%w %d: a move of %s/%d names it; the cluster has nodes 1 to %d", ErrUnknownNode, id, t.Spec.Name, i, s.nextNode-1)}
		}
		if slices.Contains(m.Replicas[:j], id) {
			return Result{Err: fmt.Errorf("%w: a move of %s/%d names node %d twice; name distinct nodes", ErrInvalid, t.Spec.Name, i, id)}
		}
	}
	p := &t.Partitions[i]
	if p.Target == nil && slices.Equal(m.Replicas, p.Replicas) {
		return Result{} // already there
	}
	// A move back to the replicas the partition has (a move given up, or
	// redirected to where it started) is a move like any other, not the
	// end of one: the group's configuration may already hold a learner
	// the move added, or even be past the joint change, and only the
	// group's leader, walking it back and recording the end (FinishMove),
	// can say it holds exactly Replicas again. Until then no node deletes
	// its copy (see placeTopic).
	// A node that neither holds nor gets a replica gets a new incarnation:
	// its replica is a new member of the group, whatever it held before.
	holders := p.Holders()
	for _, id := range m.Replicas {
		if !slices.Contains(holders, id) {
			s.lastInc++
			if p.Incarnations == nil {
				p.Incarnations = map[NodeID]uint32{}
			}
			p.Incarnations[id] = s.lastInc
		}
	}
	p.Target, p.Moved = slices.Clone(m.Replicas), true
	p.keepIncarnations()
	return Result{}
}

// checkOperatorMove refuses an operator's move to a node that is down or
// leaving (the other refusals are applyMove's).
func (s *State) checkOperatorMove(m MoveReplicas) error {
	t, i, ok := s.partitionOf(m.Group)
	if !ok {
		return nil // applyMove refuses it
	}
	for _, id := range m.Replicas {
		n, ok := s.Node(id)
		switch {
		case !ok:
		case n.Leaving:
			return fmt.Errorf("%w: a move of %s/%d names node %d, which is leaving (decommissioned): choose nodes that stay (spool cluster status)", ErrNodeUnavailable, t.Spec.Name, i, id)
		case n.Down:
			return fmt.Errorf("%w: a move of %s/%d names node %d, which is down (unreachable past the dead-node timeout): choose nodes that are up (spool cluster status), or start node %d again first", ErrNodeUnavailable, t.Spec.Name, i, id, id)
		}
	}
	return nil
}

// applyDeleteTopic removes a topic; its group ids stay used (nextGroup
// does not go back).
func (s *State) applyDeleteTopic(name string) Result {
	t, ok := s.topics[name]
	if !ok {
		return Result{Err: fmt.Errorf("%w %q: nothing to delete (names are case-sensitive; spool topic list shows the topics)", ErrUnknownTopic, name)}
	}
	i, _ := slices.BinarySearch(s.names, name)
	s.names = slices.Delete(s.names, i, i+1)
	delete(s.topics, name)
	delete(s.byFold, strings.ToLower(name))
	s.total -= int(t.Spec.Partitions)
	return Result{}
}

func (s *State) applyDropDamaged(d DropDamaged) Result {
	t, i, ok := s.partitionOf(d.Group)
	if !ok {
		return Result{Err: fmt.Errorf("%w %d: no placed partition has it", ErrUnknownGroup, d.Group)}
	}
	p := &t.Partitions[i]
	switch {
	case !slices.Contains(p.Replicas, d.Node):
		return Result{Err: fmt.Errorf("%w: node %d holds no replica of %s/%d (group %d): nothing to drop", ErrInvalid, d.Node, t.Spec.Name, i, d.Group)}
	case p.Target != nil:
		return Result{Err: fmt.Errorf("%w: %s/%d (group %d) is moving: its damaged replica on node %d is dropped once the move ends", ErrInvalid, t.Spec.Name, i, d.Group, d.Node)}
	case len(p.Replicas) < 2:
		return Result{Err: fmt.Errorf("%w: node %d holds the only replica of %s/%d (group %d): no copy to rebuild it from; repair it by hand (spoold repair, docs/operations.md)", ErrInvalid, d.Node, t.Spec.Name, i, d.Group)}
	}
	p.Target = slices.DeleteFunc(slices.Clone(p.Replicas), func(n NodeID) bool { return n == d.Node })
	p.Moved = true
	return Result{}
}

func (s *State) applyFinishMove(m FinishMove) Result {
	t, i, ok := s.partitionOf(m.Group)
	if !ok {
		return Result{Err: fmt.Errorf("%w %d: no placed partition has it", ErrUnknownGroup, m.Group)}
	}
	p := &t.Partitions[i]
	if p.Target == nil || !slices.Equal(p.Target, m.Replicas) {
		return Result{Err: fmt.Errorf("%w: %s/%d (group %d) is moving to %v, not %v; the group's leader continues toward the current target", ErrStaleMove, t.Spec.Name, i, m.Group, p.Target, m.Replicas)}
	}
	p.Replicas, p.Target = p.Target, nil
	p.keepIncarnations()
	return Result{}
}

func (s *State) applyDecommission(id NodeID) Result {
	i, ok := s.nodeIndex(id)
	if !ok {
		return Result{Err: fmt.Errorf("%w %d: the cluster has nodes %v; check the node id", ErrUnknownNode, id, s.nodeIDs())}
	}
	if s.nodes[i].Leaving {
		return Result{}
	}
	staying := 0
	for _, n := range s.nodes {
		if !n.Leaving && n.ID != id {
			staying++
		}
	}
	for _, name := range s.names {
		if rf := int(s.topics[name].Spec.ReplicationFactor); rf > staying {
			return Result{Err: fmt.Errorf("%w: without node %d the cluster keeps %d nodes, fewer than topic %q's replication factor %d: add a node first", ErrLimit, id, staying, name, rf)}
		}
	}
	s.nodes[i].Leaving = true
	return Result{}
}

// nodeIDs lists the node ids, for errors.
func (s *State) nodeIDs() []NodeID {
	out := make([]NodeID, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.ID
	}
	return out
}
