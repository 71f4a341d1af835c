package coord

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/spoolmq/spool/engine/internal/protocheck"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
	"google.golang.org/protobuf/proto"
)

// Sizes the decoders accept.
const (
	// MaxCommandBytes is the largest encoded command: a Join naming
	// MaxTopicsPerMember topics of MaxPartitions partitions with their
	// replica lists, or a Commit with MaxDonePerPosition finished offsets,
	// fit well under it.
	MaxCommandBytes = 2 << 20
	// MaxStateBytes is the largest encoded state (engine/raft carries up to
	// 64 MiB of snapshot data).
	MaxStateBytes = 64 << 20
)

// ErrMalformed: bytes that are not a command or a state this release can
// read (damaged, or written by a newer release).
var ErrMalformed = errors.New("coord: malformed")

var deterministic = proto.MarshalOptions{Deterministic: true}

// EncodeCommand encodes a command as a GroupsCommand (groups.proto). It
// checks only that exactly one command is set, so that whatever
// DecodeCommand returns encodes again; Validate checks the values.
func EncodeCommand(c Command) ([]byte, error) {
	if err := c.shape(); err != nil {
		return nil, err
	}
	m := &clusterv1.GroupsCommand{Group: c.Group, AtMs: c.AtMs}
	switch {
	case c.Join != nil:
		j := c.Join
		pj := &clusterv1.GroupsJoin{MemberId: j.Member, Session: j.Session, NodeId: j.Node, SessionTimeoutMs: j.SessionTimeoutMs, RevokeTimeoutMs: j.RevokeTimeoutMs, Consumers: j.Consumers}
		for _, t := range j.Topics {
			pj.Topics = append(pj.Topics, topicToProto(t))
		}
		m.Command = &clusterv1.GroupsCommand_Join{Join: pj}
	case c.Heartbeat != nil:
		h := c.Heartbeat
		m.Command = &clusterv1.GroupsCommand_Heartbeat{Heartbeat: &clusterv1.GroupsHeartbeat{MemberId: h.Member, Session: h.Session, Yield: h.Yield, Degraded: h.Degraded, Consumers: h.Consumers}}
	case c.Leave != nil:
		m.Command = &clusterv1.GroupsCommand_Leave{Leave: &clusterv1.GroupsLeave{MemberId: c.Leave.Member, Session: c.Leave.Session}}
	case c.Expire != nil:
		m.Command = &clusterv1.GroupsCommand_Expire{Expire: &clusterv1.GroupsExpire{MemberId: c.Expire.Member}}
	case c.RevokeDone != nil:
		r := c.RevokeDone
		pr := &clusterv1.GroupsRevokeDone{MemberId: r.Member, Generation: r.Generation}
		for _, tp := range r.Partitions {
			pr.Partitions = append(pr.Partitions, tpToProto(tp))
		}
		m.Command = &clusterv1.GroupsCommand_RevokeDone{RevokeDone: pr}
	case c.Reset != nil:
		pr := &clusterv1.GroupsReset{Topic: c.Reset.Topic}
		for _, pn := range c.Reset.Next {
			pr.Positions = append(pr.Positions, &clusterv1.GroupsPartitionNext{Partition: pn.Partition, Next: pn.Next})
		}
		m.Command = &clusterv1.GroupsCommand_ResetPositions{ResetPositions: pr}
	case c.DropTopic != nil:
		m.Command = &clusterv1.GroupsCommand_DropTopic{DropTopic: &clusterv1.GroupsDropTopic{Topic: c.DropTopic.Topic}}
	case c.Checkpoint != nil:
		k := c.Checkpoint
		m.Command = &clusterv1.GroupsCommand_Checkpoint{Checkpoint: &clusterv1.GroupsCheckpoint{AsOf: k.AsOf, Chunk: k.Chunk, Chunks: k.Chunks, StateSha256: k.Sum, Data: k.Data}}
	default:
		cm := c.Commit
		m.Command = &clusterv1.GroupsCommand_Commit{Commit: &clusterv1.GroupsCommit{MemberId: cm.Member, Generation: cm.Generation,
			Partition: tpToProto(cm.TopicPartition), Position: positionToProto(cm.Position)}}
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("coord: encode command: %w", err)
	}
	if len(b) > MaxCommandBytes {
		return nil, fmt.Errorf("%w: the command encodes to %d bytes, more than %d (MaxCommandBytes)", ErrInvalid, len(b), MaxCommandBytes)
	}
	return b, nil
}

// DecodeCommand decodes what EncodeCommand wrote. It refuses (ErrMalformed)
// bytes that are not a GroupsCommand, more than MaxCommandBytes, a command
// with none or an unknown kind set, and fields this release does not know
// (applying a newer release's command without them would make this
// replica's state differ from the others'). Values are checked by Apply,
// which refuses a bad one like every other replica does.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) > MaxCommandBytes {
		return Command{}, fmt.Errorf("%w command: %d bytes, more than %d (MaxCommandBytes)", ErrMalformed, len(b), MaxCommandBytes)
	}
	m := &clusterv1.GroupsCommand{}
	if err := proto.Unmarshal(b, m); err != nil {
		return Command{}, fmt.Errorf("%w command: %v", ErrMalformed, err)
	}
	if err := protocheck.UnknownFields(m.ProtoReflect()); err != nil {
		return Command{}, fmt.Errorf("%w command: %v", ErrMalformed, err)
	}
	c := Command{Group: m.GetGroup(), AtMs: m.GetAtMs()}
	switch x := m.Command.(type) {
	case *clusterv1.GroupsCommand_Join:
		j := x.Join
		cj := &Join{Member: j.GetMemberId(), Session: j.GetSession(), Node: j.GetNodeId(), SessionTimeoutMs: j.GetSessionTimeoutMs(), RevokeTimeoutMs: j.GetRevokeTimeoutMs(), Consumers: j.GetConsumers()}
		for _, t := range j.GetTopics() {
			cj.Topics = append(cj.Topics, topicFromProto(t))
		}
		c.Join = cj
	case *clusterv1.GroupsCommand_Heartbeat:
		h := x.Heartbeat
		c.Heartbeat = &Heartbeat{Member: h.GetMemberId(), Session: h.GetSession(), Yield: h.GetYield(), Degraded: h.GetDegraded(), Consumers: h.GetConsumers()}
	case *clusterv1.GroupsCommand_Leave:
		c.Leave = &Leave{Member: x.Leave.GetMemberId(), Session: x.Leave.GetSession()}
	case *clusterv1.GroupsCommand_Expire:
		c.Expire = &Expire{Member: x.Expire.GetMemberId()}
	case *clusterv1.GroupsCommand_RevokeDone:
		r := x.RevokeDone
		cr := &RevokeDone{Member: r.GetMemberId(), Generation: r.GetGeneration()}
		for _, p := range r.GetPartitions() {
			cr.Partitions = append(cr.Partitions, tpFromProto(p))
		}
		c.RevokeDone = cr
	case *clusterv1.GroupsCommand_Commit:
		cm := x.Commit
		c.Commit = &Commit{Member: cm.GetMemberId(), Generation: cm.GetGeneration(), TopicPartition: tpFromProto(cm.GetPartition()), Position: positionFromProto(cm.GetPosition())}
	case *clusterv1.GroupsCommand_ResetPositions:
		cr := &ResetPositions{Topic: x.ResetPositions.GetTopic()}
		for _, pn := range x.ResetPositions.GetPositions() {
			cr.Next = append(cr.Next, PartitionNext{Partition: pn.GetPartition(), Next: pn.GetNext()})
		}
		c.Reset = cr
	case *clusterv1.GroupsCommand_DropTopic:
		c.DropTopic = &DropTopic{Topic: x.DropTopic.GetTopic()}
	case *clusterv1.GroupsCommand_Checkpoint:
		k := x.Checkpoint
		c.Checkpoint = &Checkpoint{AsOf: k.GetAsOf(), Chunk: k.GetChunk(), Chunks: k.GetChunks(), Sum: k.GetStateSha256(), Data: k.GetData()}
	default:
		return Command{}, fmt.Errorf("%w command: no command set (a command from a newer release this node does not know? upgrade this node)", ErrMalformed)
	}
	return c, nil
}

// EncodeState encodes the whole state as a GroupsState (groups.proto):
// groups by name, members by id, topics by name, positions by topic and
// partition. The same state always encodes to the same bytes.
func EncodeState(s *State) ([]byte, error) {
	m := &clusterv1.GroupsState{LastGeneration: s.lastGen}
	for _, name := range s.names {
		g := s.groups[name]
		pg := &clusterv1.GroupsGroup{Name: name, Generation: g.generation}
		for _, mb := range g.members {
			pm := &clusterv1.GroupsMember{MemberId: mb.ID, Session: mb.Session, NodeId: mb.Node, Topics: mb.Topics, LastHeartbeatMs: mb.LastHeartbeatMs,
				SessionTimeoutMs: mb.SessionTimeoutMs, RevokeTimeoutMs: mb.RevokeTimeoutMs, Yield: mb.Yield, Degraded: mb.Degraded, Consumers: mb.Consumers}
			for _, o := range mb.Owned {
				pm.Owned = append(pm.Owned, &clusterv1.GroupsOwned{Partition: tpToProto(o.TopicPartition), GrantedGeneration: o.GrantedGen,
					Revoking: o.Revoking, RevokeGeneration: o.RevokeGen, RevokeDeadlineMs: o.RevokeDeadlineMs})
			}
			pg.Members = append(pg.Members, pm)
		}
		for _, t := range g.topics {
			pg.Topics = append(pg.Topics, topicToProto(t))
		}
		for _, tp := range slices.SortedFunc(maps.Keys(g.positions), compareTP) {
			pg.Positions = append(pg.Positions, &clusterv1.GroupsCommitted{Partition: tpToProto(tp), Position: positionToProto(g.positions[tp])})
		}
		m.Groups = append(m.Groups, pg)
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("coord: encode state: %w", err)
	}
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("%w: the state encodes to %d bytes, more than %d (MaxStateBytes)", ErrLimit, len(b), MaxStateBytes)
	}
	return b, nil
}

// DecodeState decodes what EncodeState wrote and checks every invariant a
// state reached by Apply holds (ErrMalformed naming the first one broken).
func DecodeState(b []byte) (*State, error) {
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("%w state: %d bytes, more than %d (MaxStateBytes)", ErrMalformed, len(b), MaxStateBytes)
	}
	m := &clusterv1.GroupsState{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w state: %v", ErrMalformed, err)
	}
	if err := protocheck.UnknownFields(m.ProtoReflect()); err != nil {
		return nil, fmt.Errorf("%w state: %v", ErrMalformed, err)
	}
	if len(m.Groups) > MaxGroups {
		return nil, fmt.Errorf("%w state: %d groups, more than %d (MaxGroups)", ErrMalformed, len(m.Groups), MaxGroups)
	}
	s := NewState()
	s.lastGen = m.GetLastGeneration()
	for _, pg := range m.Groups {
		if _, dup := s.groups[pg.GetName()]; dup {
			return nil, fmt.Errorf("%w state: group %q twice", ErrMalformed, pg.GetName())
		}
		if len(pg.Members) > MaxMembersPerGroup || len(pg.Topics) > MaxTopicsPerGroup || len(pg.Positions) > MaxPositionsPerGroup {
			return nil, fmt.Errorf("%w state: group %q has %d members, %d topics and %d positions, past MaxMembersPerGroup, MaxTopicsPerGroup or MaxPositionsPerGroup",
				ErrMalformed, pg.GetName(), len(pg.Members), len(pg.Topics), len(pg.Positions))
		}
		g := &group{name: pg.GetName(), generation: pg.GetGeneration(), lastGen: &s.lastGen, positions: make(map[TopicPartition]Position, len(pg.Positions))}
		for _, pm := range pg.Members {
			mb := &Member{ID: pm.GetMemberId(), Session: pm.GetSession(), Node: pm.GetNodeId(), Topics: pm.GetTopics(), LastHeartbeatMs: pm.GetLastHeartbeatMs(),
				SessionTimeoutMs: pm.GetSessionTimeoutMs(), RevokeTimeoutMs: pm.GetRevokeTimeoutMs(), Yield: pm.GetYield(), Degraded: pm.GetDegraded(), Consumers: pm.GetConsumers()}
			for _, o := range pm.Owned {
				mb.Owned = append(mb.Owned, Owned{TopicPartition: tpFromProto(o.GetPartition()), GrantedGen: o.GetGrantedGeneration(),
					Revoking: o.GetRevoking(), RevokeGen: o.GetRevokeGeneration(), RevokeDeadlineMs: o.GetRevokeDeadlineMs()})
			}
			g.members = append(g.members, mb)
		}
		for _, t := range pg.Topics {
			g.topics = append(g.topics, topicFromProto(t))
		}
		for _, pc := range pg.Positions {
			tp := tpFromProto(pc.GetPartition())
			if _, dup := g.positions[tp]; dup {
				return nil, fmt.Errorf("%w state: group %q has two positions on %s/%d", ErrMalformed, g.name, tp.Topic, tp.Partition)
			}
			g.positions[tp] = positionFromProto(pc.GetPosition())
		}
		s.groups[g.name] = g
		s.names = append(s.names, g.name)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%w state: %v", ErrMalformed, err)
	}
	return s, nil
}

func topicToProto(t Topic) *clusterv1.GroupsTopic {
	pt := &clusterv1.GroupsTopic{Name: t.Name, Partitions: t.Partitions}
	for _, r := range t.Replicas {
		pt.Replicas = append(pt.Replicas, &clusterv1.GroupsReplicas{NodeIds: r})
	}
	return pt
}

func topicFromProto(pt *clusterv1.GroupsTopic) Topic {
	t := Topic{Name: pt.GetName(), Partitions: pt.GetPartitions()}
	if len(pt.Replicas) > 0 {
		t.Replicas = make([][]NodeID, len(pt.Replicas))
		for i, r := range pt.Replicas {
			t.Replicas[i] = r.GetNodeIds()
		}
	}
	return t
}

func tpToProto(tp TopicPartition) *clusterv1.GroupsPartition {
	return &clusterv1.GroupsPartition{Topic: tp.Topic, Partition: tp.Partition}
}

func tpFromProto(p *clusterv1.GroupsPartition) TopicPartition {
	return TopicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}
}

func positionToProto(p Position) *clusterv1.GroupsPosition {
	return &clusterv1.GroupsPosition{Next: p.Next, Done: p.Done}
}

func positionFromProto(p *clusterv1.GroupsPosition) Position {
	pos := Position{Next: p.GetNext(), Done: p.GetDone()}
	if len(pos.Done) == 0 {
		pos.Done = nil
	}
	return pos
}
