package meta

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spoolmq/spool/engine/internal/protocheck"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
	"google.golang.org/protobuf/proto"
)

// Sizes the decoders accept.
const (
	// MaxCommandBytes is the largest encoded command (the largest valid one
	// is well under 1 KiB).
	MaxCommandBytes = 4 << 10
	// MaxStateBytes is the largest encoded state. A state at every count
	// limit encodes to a few MiB; engine/raft carries up to 64 MiB of
	// snapshot data (MaxSnapshotDataBytes).
	MaxStateBytes = 32 << 20
)

// ErrMalformed: bytes that are not a command or a state this release can
// read (damaged, or written by a newer release).
var ErrMalformed = errors.New("meta: malformed")

var deterministic = proto.MarshalOptions{Deterministic: true}

// EncodeCommand encodes a command as a MetaCommand (meta.proto). It checks
// only that exactly one command is set, so that whatever DecodeCommand
// returns encodes again; Validate checks the values.
func EncodeCommand(c Command) ([]byte, error) {
	if err := c.shape(); err != nil {
		return nil, err
	}
	m := &clusterv1.MetaCommand{}
	switch {
	case c.Init != nil:
		m.Command = &clusterv1.MetaCommand_Init{Init: &clusterv1.MetaInit{ClusterId: c.Init.ClusterID}}
	case c.AddNode != nil:
		m.Command = &clusterv1.MetaCommand_AddNode{AddNode: &clusterv1.MetaAddNode{Addr: c.AddNode.Addr, Token: c.AddNode.Token, Identity: c.AddNode.Identity}}
	case c.SetNodeAddr != nil:
		m.Command = &clusterv1.MetaCommand_SetNodeAddr{SetNodeAddr: &clusterv1.MetaSetNodeAddr{NodeId: c.SetNodeAddr.ID, Addr: c.SetNodeAddr.Addr}}
	case c.CreateTopic != nil:
		m.Command = &clusterv1.MetaCommand_CreateTopic{CreateTopic: &clusterv1.MetaCreateTopic{Spec: specToProto(c.CreateTopic.Spec)}}
	case c.MoveReplicas != nil:
		m.Command = &clusterv1.MetaCommand_MoveReplicas{MoveReplicas: &clusterv1.MetaMoveReplicas{GroupId: c.MoveReplicas.Group, Replicas: c.MoveReplicas.Replicas, Pin: c.MoveReplicas.Pin}}
	case c.FinishMove != nil:
		m.Command = &clusterv1.MetaCommand_FinishMove{FinishMove: &clusterv1.MetaFinishMove{GroupId: c.FinishMove.Group, Replicas: c.FinishMove.Replicas}}
	case c.SetNodeDown != nil:
		m.Command = &clusterv1.MetaCommand_SetNodeDown{SetNodeDown: &clusterv1.MetaSetNodeDown{NodeId: c.SetNodeDown.ID, Down: c.SetNodeDown.Down}}
	case c.DecommissionNode != nil:
		m.Command = &clusterv1.MetaCommand_DecommissionNode{DecommissionNode: &clusterv1.MetaDecommissionNode{NodeId: c.DecommissionNode.ID}}
	case c.RemoveNode != nil:
		m.Command = &clusterv1.MetaCommand_RemoveNode{RemoveNode: &clusterv1.MetaRemoveNode{NodeId: c.RemoveNode.ID}}
	case c.DeleteTopic != nil:
		m.Command = &clusterv1.MetaCommand_DeleteTopic{DeleteTopic: &clusterv1.MetaDeleteTopic{Name: c.DeleteTopic.Name}}
	case c.DropDamaged != nil:
		m.Command = &clusterv1.MetaCommand_DropDamagedReplica{DropDamagedReplica: &clusterv1.MetaDropDamagedReplica{GroupId: c.DropDamaged.Group, NodeId: c.DropDamaged.Node}}
	case c.FinalizeVersion != nil:
		f := &clusterv1.MetaFinalizeVersion{Version: c.FinalizeVersion.Version}
		for _, mv := range c.FinalizeVersion.Members {
			f.Members = append(f.Members, &clusterv1.MetaMemberVersions{NodeId: mv.Node, Min: mv.Speaks.Min, Max: mv.Speaks.Max})
		}
		m.Command = &clusterv1.MetaCommand_FinalizeVersion{FinalizeVersion: f}
	default:
		a := c.AlterTopic
		m.Command = &clusterv1.MetaCommand_AlterTopic{AlterTopic: &clusterv1.MetaAlterTopic{Name: a.Name, RetentionAgeMs: a.RetentionAgeMs, RetentionBytes: a.RetentionBytes}}
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("meta: encode command: %w", err)
	}
	if len(b) > MaxCommandBytes {
		return nil, fmt.Errorf("%w: the command encodes to %d bytes, more than %d (MaxCommandBytes): shorten its strings", ErrInvalid, len(b), MaxCommandBytes)
	}
	return b, nil
}

// DecodeCommand decodes what EncodeCommand wrote. It refuses (ErrMalformed)
// bytes that are not a MetaCommand, more than MaxCommandBytes, a command
// with none or an unknown kind set, and fields this release does not know
// (applying a newer release's command without them would make this node's
// state differ from the others'). Values are checked by Apply, which
// refuses a bad one like every other node does.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) > MaxCommandBytes {
		return Command{}, fmt.Errorf("%w command: %d bytes, more than %d (MaxCommandBytes)", ErrMalformed, len(b), MaxCommandBytes)
	}
	m := &clusterv1.MetaCommand{}
	if err := proto.Unmarshal(b, m); err != nil {
		return Command{}, fmt.Errorf("%w command: %v", ErrMalformed, err)
	}
	if err := protocheck.UnknownFields(m.ProtoReflect()); err != nil {
		return Command{}, fmt.Errorf("%w command: %v", ErrMalformed, err)
	}
	switch x := m.Command.(type) {
	case *clusterv1.MetaCommand_Init:
		return Command{Init: &Init{ClusterID: x.Init.GetClusterId()}}, nil
	case *clusterv1.MetaCommand_AddNode:
		return Command{AddNode: &AddNode{Addr: x.AddNode.GetAddr(), Token: x.AddNode.GetToken(), Identity: x.AddNode.GetIdentity()}}, nil
	case *clusterv1.MetaCommand_SetNodeAddr:
		return Command{SetNodeAddr: &SetNodeAddr{ID: x.SetNodeAddr.GetNodeId(), Addr: x.SetNodeAddr.GetAddr()}}, nil
	case *clusterv1.MetaCommand_CreateTopic:
		if x.CreateTopic.GetSpec() == nil {
			return Command{}, fmt.Errorf("%w command: create_topic without a spec", ErrMalformed)
		}
		return Command{CreateTopic: &CreateTopic{Spec: specFromProto(x.CreateTopic.GetSpec())}}, nil
	case *clusterv1.MetaCommand_AlterTopic:
		a := x.AlterTopic
		return Command{AlterTopic: &AlterTopic{Name: a.GetName(), RetentionAgeMs: a.GetRetentionAgeMs(), RetentionBytes: a.GetRetentionBytes()}}, nil
	case *clusterv1.MetaCommand_MoveReplicas:
		return Command{MoveReplicas: &MoveReplicas{Group: x.MoveReplicas.GetGroupId(), Replicas: x.MoveReplicas.GetReplicas(), Pin: x.MoveReplicas.GetPin()}}, nil
	case *clusterv1.MetaCommand_FinishMove:
		return Command{FinishMove: &FinishMove{Group: x.FinishMove.GetGroupId(), Replicas: x.FinishMove.GetReplicas()}}, nil
	case *clusterv1.MetaCommand_SetNodeDown:
		return Command{SetNodeDown: &SetNodeDown{ID: x.SetNodeDown.GetNodeId(), Down: x.SetNodeDown.GetDown()}}, nil
	case *clusterv1.MetaCommand_DecommissionNode:
		return Command{DecommissionNode: &DecommissionNode{ID: x.DecommissionNode.GetNodeId()}}, nil
	case *clusterv1.MetaCommand_RemoveNode:
		return Command{RemoveNode: &RemoveNode{ID: x.RemoveNode.GetNodeId()}}, nil
	case *clusterv1.MetaCommand_DeleteTopic:
		return Command{DeleteTopic: &DeleteTopic{Name: x.DeleteTopic.GetName()}}, nil
	case *clusterv1.MetaCommand_DropDamagedReplica:
		return Command{DropDamaged: &DropDamaged{Group: x.DropDamagedReplica.GetGroupId(), Node: x.DropDamagedReplica.GetNodeId()}}, nil
	case *clusterv1.MetaCommand_FinalizeVersion:
		f := &FinalizeVersion{Version: x.FinalizeVersion.GetVersion()}
		for _, mv := range x.FinalizeVersion.GetMembers() {
			f.Members = append(f.Members, MemberVersions{Node: mv.GetNodeId(), Speaks: VersionRange{Min: mv.GetMin(), Max: mv.GetMax()}})
		}
		return Command{FinalizeVersion: f}, nil
	default:
		return Command{}, fmt.Errorf("%w command: no command set (a command from a newer release this node does not know? upgrade this node)", ErrMalformed)
	}
}

// EncodeState encodes the whole state as a MetaState (meta.proto): nodes by
// id, topics by name. The same state always encodes to the same bytes. A
// state at cluster version 1 is written as 0.1.0 wrote it (no version
// field), so that 0.1.0 nodes read it.
func EncodeState(s *State) ([]byte, error) {
	m := &clusterv1.MetaState{ClusterId: s.clusterID, NextNodeId: s.nextNode, NextGroupId: s.nextGroup, LastIncarnation: s.lastInc}
	if s.Enabled(VersionedState) {
		m.ClusterVersion = s.ClusterVersion()
	}
	for _, n := range s.nodes {
		m.Nodes = append(m.Nodes, &clusterv1.MetaNode{Id: n.ID, Addr: n.Addr, Token: n.Token, Down: n.Down, Leaving: n.Leaving, Identity: n.Identity})
	}
	for _, name := range s.names {
		t := s.topics[name]
		pt := &clusterv1.MetaTopic{Spec: specToProto(t.Spec)}
		for _, p := range t.Partitions {
			pt.Partitions = append(pt.Partitions, &clusterv1.MetaPartition{GroupId: p.Group, Replicas: p.Replicas, Target: p.Target, Moved: p.Moved, Pinned: p.Pinned, Incarnations: p.Incarnations})
		}
		m.Topics = append(m.Topics, pt)
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("meta: encode state: %w", err)
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
	m := &clusterv1.MetaState{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w state: %v", ErrMalformed, err)
	}
	if err := protocheck.UnknownFields(m.ProtoReflect()); err != nil {
		return nil, fmt.Errorf("%w state: %v", ErrMalformed, err)
	}
	if len(m.Nodes) > MaxNodes || len(m.Topics) > MaxTopics {
		return nil, fmt.Errorf("%w state: %d nodes and %d topics, more than %d (MaxNodes) or %d (MaxTopics)", ErrMalformed, len(m.Nodes), len(m.Topics), MaxNodes, MaxTopics)
	}
	if v := m.ClusterVersion; v > MaxClusterVersion {
		return nil, fmt.Errorf("%w state: %w", ErrMalformed, CheckSpeaks(v, Speaks()))
	}
	s := NewState()
	s.clusterID, s.nextNode, s.nextGroup, s.lastInc = m.ClusterId, m.NextNodeId, m.NextGroupId, m.LastIncarnation
	if m.ClusterVersion > 1 {
		s.version = m.ClusterVersion
	}
	for _, n := range m.Nodes {
		s.nodes = append(s.nodes, Node{ID: n.GetId(), Addr: n.GetAddr(), Token: n.GetToken(), Down: n.GetDown(), Leaving: n.GetLeaving(), Identity: n.GetIdentity()})
		s.byToken[n.GetToken()] = n.GetId()
	}
	for i, pt := range m.Topics {
		if pt.GetSpec() == nil {
			return nil, fmt.Errorf("%w state: topic %d has no spec", ErrMalformed, i)
		}
		t := &Topic{Spec: specFromProto(pt.GetSpec())}
		if _, dup := s.topics[t.Spec.Name]; dup {
			return nil, fmt.Errorf("%w state: topic %q twice", ErrMalformed, t.Spec.Name)
		}
		if len(pt.Partitions) > MaxPartitions {
			return nil, fmt.Errorf("%w state: topic %q has %d partitions, more than %d (MaxPartitions)", ErrMalformed, t.Spec.Name, len(pt.Partitions), MaxPartitions)
		}
		if len(pt.Partitions) > 0 {
			t.Partitions = make([]Partition, len(pt.Partitions))
			for j, p := range pt.Partitions {
				t.Partitions[j] = Partition{Group: p.GetGroupId(), Replicas: p.GetReplicas(), Target: p.GetTarget(), Moved: p.GetMoved(), Pinned: p.GetPinned(), Incarnations: p.GetIncarnations()}
				if len(t.Partitions[j].Target) == 0 {
					t.Partitions[j].Target = nil
				}
				if len(t.Partitions[j].Incarnations) == 0 {
					t.Partitions[j].Incarnations = nil
				}
			}
		}
		s.names = append(s.names, t.Spec.Name)
		s.topics[t.Spec.Name] = t
		s.byFold[strings.ToLower(t.Spec.Name)] = t.Spec.Name
		s.total += max(0, int(t.Spec.Partitions))
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%w state: %v", ErrMalformed, err)
	}
	return s, nil
}

func specToProto(s TopicSpec) *clusterv1.MetaTopicSpec {
	return &clusterv1.MetaTopicSpec{Name: s.Name, Partitions: s.Partitions, ReplicationFactor: s.ReplicationFactor, RetentionAgeMs: s.RetentionAgeMs, RetentionBytes: s.RetentionBytes}
}

func specFromProto(p *clusterv1.MetaTopicSpec) TopicSpec {
	return TopicSpec{Name: p.GetName(), Partitions: p.GetPartitions(), ReplicationFactor: p.GetReplicationFactor(), RetentionAgeMs: p.GetRetentionAgeMs(), RetentionBytes: p.GetRetentionBytes()}
}
