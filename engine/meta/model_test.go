package meta

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The model: what a dumb reading of the rules predicts for each command.
// Value rules (names, ranges, addresses) are Validate's, tested by
// TestValidate; the model predicts everything that depends on the state.
type model struct {
	clusterID string
	nodes     []Node // in order added
	topics    map[string]*modelTopic
}

type modelTopic struct {
	spec    TopicSpec
	pending bool // created with fewer nodes than its RF, not yet placed
}

// predict returns the refusal the model expects (nil: accepted) and, for
// AddNode, the node id; on acceptance it updates the model.
func (m *model) predict(c Command) (NodeID, error) {
	if err := c.Validate(); err != nil {
		if !errors.Is(err, ErrInvalid) {
			panic(err)
		}
		return 0, ErrInvalid
	}
	if c.Init != nil {
		if m.clusterID != "" {
			return 0, ErrAlreadyInitialized
		}
		m.clusterID = c.Init.ClusterID
		return 0, nil
	}
	if m.clusterID == "" {
		return 0, ErrNotInitialized
	}
	switch {
	case c.AddNode != nil:
		for i, n := range m.nodes {
			if n.Token == c.AddNode.Token {
				m.nodes[i].Addr = c.AddNode.Addr
				return n.ID, nil
			}
		}
		if len(m.nodes) == MaxNodes {
			return 0, ErrLimit
		}
		id := NodeID(len(m.nodes) + 1)
		m.nodes = append(m.nodes, Node{ID: id, Addr: c.AddNode.Addr, Token: c.AddNode.Token})
		for _, t := range m.topics {
			if t.pending && int(t.spec.ReplicationFactor) <= len(m.nodes) {
				t.pending = false
			}
		}
		return id, nil
	case c.SetNodeAddr != nil:
		for i, n := range m.nodes {
			if n.ID == c.SetNodeAddr.ID {
				m.nodes[i].Addr = c.SetNodeAddr.Addr
				return 0, nil
			}
		}
		return 0, ErrUnknownNode
	case c.CreateTopic != nil:
		spec := c.CreateTopic.Spec
		for name, t := range m.topics {
			if strings.EqualFold(name, spec.Name) {
				if name != spec.Name || t.spec.Partitions != spec.Partitions || t.spec.ReplicationFactor != spec.ReplicationFactor {
					return 0, ErrTopicConflict
				}
				t.spec.RetentionAgeMs, t.spec.RetentionBytes = spec.RetentionAgeMs, spec.RetentionBytes
				return 0, nil
			}
		}
		m.topics[spec.Name] = &modelTopic{spec: spec, pending: len(m.nodes) < int(spec.ReplicationFactor)}
		return 0, nil
	case c.DeleteTopic != nil:
		if _, ok := m.topics[c.DeleteTopic.Name]; !ok {
			return 0, ErrUnknownTopic
		}
		delete(m.topics, c.DeleteTopic.Name)
		return 0, nil
	default:
		t, ok := m.topics[c.AlterTopic.Name]
		if !ok {
			return 0, ErrUnknownTopic
		}
		t.spec.RetentionAgeMs, t.spec.RetentionBytes = c.AlterTopic.RetentionAgeMs, c.AlterTopic.RetentionBytes
		return 0, nil
	}
}

// Small pools, so that commands hit each other (same tokens, same names,
// names differing in case); each value is invalid one time in five.
func pick[T any](t *rapid.T, label string, valid, invalid []T) T {
	if rapid.IntRange(0, 4).Draw(t, label+" invalid") == 0 {
		return rapid.SampledFrom(invalid).Draw(t, label)
	}
	return rapid.SampledFrom(valid).Draw(t, label)
}

func drawCommand(t *rapid.T) Command {
	addr := func() string {
		return pick(t, "addr", []string{"10.0.0.1:7946", "node-2.spool:7946", "[::1]:7946"}, []string{"host", ":7946", "h:0", "h:65536", "[h]:1"})
	}
	switch rapid.IntRange(0, 10).Draw(t, "kind") {
	case 0:
		return Command{Init: &Init{ClusterID: pick(t, "cluster", []string{"prod", "other"}, []string{"", "bad id"})}}
	case 1, 2, 3:
		return Command{AddNode: &AddNode{Addr: addr(), Token: pick(t, "token", []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7"}, []string{"", "a b"})}}
	case 4:
		return Command{SetNodeAddr: &SetNodeAddr{ID: rapid.Uint64Range(0, 8).Draw(t, "id"), Addr: addr()}}
	case 5, 6, 7:
		return Command{CreateTopic: &CreateTopic{Spec: TopicSpec{
			Name:              pick(t, "name", []string{"a", "b", "c", "d", "orders", "Orders"}, []string{"__internal", "..", "x/y", ""}),
			Partitions:        pick(t, "partitions", []int32{1, 2, 3, 5, 8}, []int32{-1, 0, MaxPartitions + 1}),
			ReplicationFactor: pick(t, "rf", []int32{1, 2, 3, 3, 4, 5}, []int32{0, -1, MaxReplicationFactor + 1}),
			RetentionAgeMs:    pick(t, "age", []int64{0, 60_000}, []int64{-1}),
			RetentionBytes:    pick(t, "bytes", []int64{0, 1 << 30}, []int64{-1}),
		}}}
	case 8:
		return Command{AlterTopic: &AlterTopic{
			Name:           pick(t, "name", []string{"a", "b", "orders", "Orders"}, []string{"__internal", "x/y"}),
			RetentionAgeMs: pick(t, "age", []int64{0, 1000}, []int64{-1}),
			RetentionBytes: pick(t, "bytes", []int64{0, 4096}, []int64{-1}),
		}}
	case 9:
		return Command{DeleteTopic: &DeleteTopic{
			Name: pick(t, "name", []string{"a", "b", "c", "orders", "Orders"}, []string{GroupsTopic, "__internal", "x/y", ""}),
		}}
	default: // none or two set
		if rapid.Bool().Draw(t, "none") {
			return Command{}
		}
		return Command{Init: &Init{ClusterID: "prod"}, AddNode: &AddNode{Addr: "h:1", Token: "t1"}}
	}
}

// spread is the most minus the fewest replicas (and preferred leaderships)
// on a node; extra nodes with none count too.
func spread(s *State, extraEmpty int) (reps, leads int) {
	r, l := s.loads()
	for range extraEmpty {
		r, l = append(r, 0), append(l, 0)
	}
	if len(r) == 0 {
		return 0, 0
	}
	return slices.Max(r) - slices.Min(r), slices.Max(l) - slices.Min(l)
}

func mustEncode(t rapid.TB, s *State) []byte {
	b, err := EncodeState(s)
	if err != nil {
		t.Fatalf("encode state: %v", err)
	}
	return b
}

// TestApplyModel: random command sequences, valid and not. Two states fed
// the same commands agree byte for byte (and with a clone and a decoded
// copy); every result is the model's; every invariant holds after every
// command; group ids only grow (a topic deleted and created again gets new
// ones); placement keeps replicas balanced; a topic is pending exactly
// while the model says so.
func TestApplyModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := NewState(), NewState()
		m := &model{topics: map[string]*modelTopic{}}
		if rapid.Bool().Draw(t, "init first") {
			c := Command{Init: &Init{ClusterID: "prod"}}
			a.Apply(c)
			b.Apply(c)
			m.predict(c)
		}
		maxGroup := uint64(0)
		for i := range rapid.IntRange(1, 60).Draw(t, "commands") {
			c := drawCommand(t)
			before := a.Clone()
			beforeBytes := mustEncode(t, a)
			wantID, wantErr := m.predict(c)
			ra, rb := a.Apply(c), b.Apply(c)
			if (ra.Err == nil) != (rb.Err == nil) || ra.NodeID != rb.NodeID || ra.Err != nil && ra.Err.Error() != rb.Err.Error() {
				t.Fatalf("command %d %+v: two states answered %+v and %+v", i, c, ra, rb)
			}
			if wantErr == nil && ra.Err != nil || wantErr != nil && !errors.Is(ra.Err, wantErr) {
				t.Fatalf("command %d %+v: got %v, the model expects %v", i, describe(c), ra.Err, wantErr)
			}
			if ra.NodeID != wantID {
				t.Fatalf("command %d %+v: node id %d, the model expects %d", i, describe(c), ra.NodeID, wantID)
			}
			enc := mustEncode(t, a)
			if !bytes.Equal(enc, mustEncode(t, b)) {
				t.Fatalf("command %d: two states fed the same commands encode differently", i)
			}
			if ra.Err != nil && !bytes.Equal(enc, beforeBytes) {
				t.Fatalf("command %d %+v: refused (%v) but the state changed", i, describe(c), ra.Err)
			}
			if err := a.check(); err != nil {
				t.Fatalf("command %d %+v: invariant broken: %v", i, describe(c), err)
			}
			d, err := DecodeState(enc)
			if err != nil {
				t.Fatalf("command %d: decode the encoded state: %v", i, err)
			}
			if !bytes.Equal(mustEncode(t, d), enc) || !reflect.DeepEqual(d.Topics(), a.Topics()) || !reflect.DeepEqual(d.Nodes(), a.Nodes()) {
				t.Fatalf("command %d: the state does not round-trip through EncodeState/DecodeState", i)
			}
			if !bytes.Equal(mustEncode(t, a.Clone()), enc) {
				t.Fatalf("command %d: a clone encodes differently", i)
			}
			checkAgainstModel(t, a, m)
			maxGroup = checkPlacement(t, before, a, c, ra, maxGroup)
		}
		// A clone is independent: changing it leaves the original alone.
		orig := mustEncode(t, a)
		cl := a.Clone()
		cl.Apply(Command{AddNode: &AddNode{Addr: "z:1", Token: "clone-only"}})
		cl.Apply(Command{AlterTopic: &AlterTopic{Name: "a", RetentionAgeMs: 7}})
		if !bytes.Equal(mustEncode(t, a), orig) {
			t.Fatalf("applying to a clone changed the original")
		}
	})
}

func describe(c Command) string {
	b, err := EncodeCommand(c)
	if err != nil {
		return err.Error()
	}
	d, _ := DecodeCommand(b)
	switch {
	case d.Init != nil:
		return "Init" + strings.TrimPrefix(reflectString(*d.Init), "meta.")
	case d.AddNode != nil:
		return "AddNode" + reflectString(*d.AddNode)
	case d.SetNodeAddr != nil:
		return "SetNodeAddr" + reflectString(*d.SetNodeAddr)
	case d.CreateTopic != nil:
		return "CreateTopic" + reflectString(*d.CreateTopic)
	case d.DeleteTopic != nil:
		return "DeleteTopic" + reflectString(*d.DeleteTopic)
	default:
		return "AlterTopic" + reflectString(*d.AlterTopic)
	}
}

func reflectString(v any) string {
	var sb strings.Builder
	sb.WriteString("{")
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		if i > 0 {
			sb.WriteString(" ")
		}
		sb.WriteString(rv.Type().Field(i).Name + ":")
		sb.WriteString(strings.TrimSpace(strings.ReplaceAll(reflect.ValueOf(rv.Field(i).Interface()).String(), "\n", " ")))
	}
	sb.WriteString("}")
	return sb.String()
}

func checkAgainstModel(t *rapid.T, s *State, m *model) {
	if s.ClusterID() != m.clusterID {
		t.Fatalf("cluster id %q, the model has %q", s.ClusterID(), m.clusterID)
	}
	if !reflect.DeepEqual(s.Nodes(), m.nodes) && !(len(m.nodes) == 0 && len(s.Nodes()) == 0) {
		t.Fatalf("nodes %+v, the model has %+v", s.Nodes(), m.nodes)
	}
	ts := s.Topics()
	if len(ts) != len(m.topics) {
		t.Fatalf("%d topics, the model has %d", len(ts), len(m.topics))
	}
	for _, topic := range ts {
		mt, ok := m.topics[topic.Spec.Name]
		if !ok || topic.Spec != mt.spec {
			t.Fatalf("topic %+v, the model has %+v", topic.Spec, mt)
		}
		if topic.Pending() != mt.pending {
			t.Fatalf("topic %q pending %v, the model says %v", topic.Spec.Name, topic.Pending(), mt.pending)
		}
	}
	// PartitionsOf agrees with the topics.
	for _, n := range s.Nodes() {
		var want []Assignment
		for _, topic := range ts {
			for p, part := range topic.Partitions {
				if slices.Contains(part.Replicas, n.ID) {
					want = append(want, Assignment{Topic: topic.Spec.Name, Partition: int32(p), Group: part.Group, Replicas: part.Replicas})
				}
			}
		}
		slices.SortFunc(want, func(a, b Assignment) int { return int(a.Group) - int(b.Group) })
		if got := s.PartitionsOf(n.ID); !reflect.DeepEqual(got, want) {
			t.Fatalf("PartitionsOf(%d) = %+v, want %+v", n.ID, got, want)
		}
	}
}

// checkPlacement checks what a command placed: new groups only above every
// group before, topics placed by one AddNode in name order, the replica
// spread at most max(1, before). It returns the highest group id now.
func checkPlacement(t *rapid.T, before, after *State, c Command, r Result, maxGroup uint64) uint64 {
	var placed []Topic
	for _, topic := range after.Topics() {
		if old, ok := before.Topic(topic.Spec.Name); !topic.Pending() && (!ok || old.Pending()) {
			placed = append(placed, topic)
		}
	}
	if len(placed) == 0 {
		return maxGroup
	}
	if r.Err != nil {
		t.Fatalf("a refused command placed topics")
	}
	newNode := 0
	if c.AddNode != nil && len(after.Nodes()) > len(before.Nodes()) {
		newNode = 1
	} else if c.CreateTopic == nil {
		t.Fatalf("%s placed topics", describe(c))
	}
	prev := maxGroup
	for _, topic := range placed { // by name: groups must rise in that order
		for _, p := range topic.Partitions {
			if p.Group <= prev {
				t.Fatalf("topic %q got group %d, not above %d (groups reused or not in name order)", topic.Spec.Name, p.Group, prev)
			}
			prev = p.Group
		}
	}
	rb, _ := spread(before, newNode)
	ra, _ := spread(after, 0)
	if ra > max(1, rb) {
		t.Fatalf("%s: replica spread %d after placing, %d before", describe(c), ra, rb)
	}
	return prev
}
