package meta

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func mustApply(t interface {
	Helper()
	Fatalf(string, ...any)
}, s *State, c Command) Result {
	t.Helper()
	r := s.Apply(c)
	if r.Err != nil {
		t.Fatalf("apply %+v: %v", c, r.Err)
	}
	return r
}

func create(name string, partitions, rf int32) Command {
	return Command{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: rf}}}
}

func replicas(t testing.TB, s *State, name string) [][]NodeID {
	t.Helper()
	topic, ok := s.Topic(name)
	if !ok {
		t.Fatalf("no topic %q", name)
	}
	var out [][]NodeID
	for _, p := range topic.Partitions {
		out = append(out, p.Replicas)
	}
	return out
}

// TestPlacementExample pins the placement of a small cluster: leaders
// rotate, ties go to the lowest id, groups count up from 1 in partition
// order.
func TestPlacementExample(t *testing.T) {
	s := stateWithNodes(t, 3)
	mustApply(t, s, create("orders", 4, 3))
	if got, want := replicas(t, s, "orders"), [][]NodeID{{1, 2, 3}, {2, 1, 3}, {3, 1, 2}, {1, 2, 3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("orders placed on %v, want %v", got, want)
	}
	mustApply(t, s, create("audit", 2, 1))
	// Replica counts are 4 4 4 and preferred leaderships 2 1 1: any node
	// keeps replicas balanced, node 2 (fewest leaderships, lowest id) also
	// leaders; then 4 5 4 and 2 2 1: node 1 or 3, and node 3 for leaders.
	if got, want := replicas(t, s, "audit"), [][]NodeID{{2}, {3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("audit placed on %v, want %v", got, want)
	}
	topic, _ := s.Topic("orders")
	for p, part := range topic.Partitions {
		if part.Group != uint64(p+1) {
			t.Fatalf("partition %d has group %d, want %d", p, part.Group, p+1)
		}
	}
	if s.NextGroupID() != 7 {
		t.Fatalf("next group %d, want 7", s.NextGroupID())
	}
	if got := s.PartitionsOf(3); len(got) != 5 || got[0].Group != 1 || got[4].Group != 6 || got[4].Topic != "audit" {
		t.Fatalf("node 3 holds %+v", got)
	}
}

// TestPendingTopics: a topic created with fewer nodes than its replication
// factor waits; the AddNode that brings enough places it and every other
// placeable pending topic, in name order (group ids rise in that order).
func TestPendingTopics(t *testing.T) {
	s := stateWithNodes(t, 1)
	mustApply(t, s, create("zeta", 1, 3))
	mustApply(t, s, create("alpha", 2, 3))
	mustApply(t, s, create("mid", 1, 2))
	mustApply(t, s, create("one", 1, 1))
	for _, name := range []string{"zeta", "alpha", "mid"} {
		if topic, _ := s.Topic(name); !topic.Pending() || topic.Partitions != nil {
			t.Fatalf("%s: %+v, want pending", name, topic)
		}
	}
	if one, _ := s.Topic("one"); one.Pending() || one.Partitions[0].Group != 1 {
		t.Fatalf("one: %+v, want placed with group 1", one)
	}
	mustApply(t, s, Command{AddNode: &AddNode{Addr: "b:1", Token: "b"}})
	if mid, _ := s.Topic("mid"); mid.Pending() || mid.Partitions[0].Group != 2 {
		t.Fatalf("mid: %+v, want placed with group 2", mid)
	}
	r := mustApply(t, s, Command{AddNode: &AddNode{Addr: "c:1", Token: "c"}})
	if r.NodeID != 3 {
		t.Fatalf("node id %d, want 3", r.NodeID)
	}
	alpha, _ := s.Topic("alpha")
	zeta, _ := s.Topic("zeta")
	if alpha.Pending() || zeta.Pending() || alpha.Partitions[0].Group != 3 || alpha.Partitions[1].Group != 4 || zeta.Partitions[0].Group != 5 {
		t.Fatalf("alpha %+v zeta %+v: want groups 3, 4 then 5", alpha, zeta)
	}
	// A retried join (same token) is the same node, and places nothing.
	if r := mustApply(t, s, Command{AddNode: &AddNode{Addr: "c2:1", Token: "c"}}); r.NodeID != 3 {
		t.Fatalf("retried join got node %d, want 3", r.NodeID)
	}
	if n, _ := s.Node(3); n.Addr != "c2:1" || len(s.Nodes()) != 3 || s.NextNodeID() != 4 {
		t.Fatalf("after a retried join: node %+v, %d nodes, next id %d", n, len(s.Nodes()), s.NextNodeID())
	}
}

// TestPlacementBalancesLeaders: when every topic has the same replication
// factor and the nodes joined before the topics, replica counts and
// preferred-leader counts per node each differ by at most one after every
// topic. (With mixed replication factors or later joins the replica rule
// comes first and leaders are balanced only as far as it allows: the model
// test checks replicas only.)
func TestPlacementBalancesLeaders(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 9).Draw(t, "nodes")
		s := stateWithNodes(t, n)
		rf := rapid.Int32Range(1, int32(min(n, MaxReplicationFactor))).Draw(t, "rf")
		for k := range rapid.IntRange(1, 10).Draw(t, "topics") {
			r := s.Apply(create(fmt.Sprint("t", k), rapid.Int32Range(1, 12).Draw(t, "partitions"), rf))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if reps, leads := spread(s, 0); reps > 1 || leads > 1 {
				t.Fatalf("after topic %d: replica spread %d, leader spread %d", k, reps, leads)
			}
		}
	})
}

// TestRefusals: each refusal matches its sentinel, says what was wrong and
// what to do, and changes nothing.
func TestRefusals(t *testing.T) {
	s := NewState()
	for _, tc := range []struct {
		name string
		c    Command
		is   error
		says []string
	}{
		{"before init", Command{AddNode: &AddNode{Addr: "a:1", Token: "a"}}, ErrNotInitialized, []string{"Init"}},
		{"init", Command{Init: &Init{ClusterID: "prod"}}, nil, nil},
		{"init again", Command{Init: &Init{ClusterID: "prod"}}, ErrAlreadyInitialized, []string{`"prod"`}},
		{"add", Command{AddNode: &AddNode{Addr: "a:1", Token: "a"}}, nil, nil},
		{"unknown node", Command{SetNodeAddr: &SetNodeAddr{ID: 5, Addr: "b:1"}}, ErrUnknownNode, []string{"5", "nodes 1 to 1"}},
		{"topic", create("orders", 3, 1), nil, nil},
		{"same again", Command{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: "orders", Partitions: 3, ReplicationFactor: 1, RetentionAgeMs: 5}}}, nil, nil},
		{"more partitions", create("orders", 4, 1), ErrTopicConflict, []string{"3 partitions", "not 4", "another name"}},
		{"other rf", create("orders", 3, 2), ErrTopicConflict, []string{"replication factor 1"}},
		{"case", create("ORDERS", 3, 1), ErrTopicConflict, []string{`"orders"`, "ignoring case"}},
		{"unknown topic", Command{AlterTopic: &AlterTopic{Name: "Orders"}}, ErrUnknownTopic, []string{"case-sensitive"}},
		{"alter", Command{AlterTopic: &AlterTopic{Name: "orders", RetentionBytes: 9}}, nil, nil},
		{"none", Command{}, ErrInvalid, []string{"exactly one"}},
	} {
		before, _ := EncodeState(s)
		r := s.Apply(tc.c)
		if tc.is == nil {
			if r.Err != nil {
				t.Fatalf("%s: %v", tc.name, r.Err)
			}
			continue
		}
		if !errors.Is(r.Err, tc.is) {
			t.Fatalf("%s: %v, want %v", tc.name, r.Err, tc.is)
		}
		for _, w := range tc.says {
			if !strings.Contains(r.Err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, r.Err, w)
			}
		}
		if after, _ := EncodeState(s); string(after) != string(before) {
			t.Fatalf("%s: refused but changed the state", tc.name)
		}
	}
	orders, _ := s.Topic("orders")
	if orders.Spec.RetentionAgeMs != 0 || orders.Spec.RetentionBytes != 9 {
		t.Fatalf("orders retention %+v, want age 0 (alter) bytes 9", orders.Spec)
	}
}

// TestValidate: every value rule, with what the error names.
func TestValidate(t *testing.T) {
	long := strings.Repeat("a", MaxNameBytes+1)
	spec := func(f func(*TopicSpec)) Command {
		s := TopicSpec{Name: "orders", Partitions: 1, ReplicationFactor: 3}
		f(&s)
		return Command{CreateTopic: &CreateTopic{Spec: s}}
	}
	ok := []Command{
		{Init: &Init{ClusterID: "prod-eu.1_x"}},
		{AddNode: &AddNode{Addr: "10.0.0.1:7946", Token: "550e8400-e29b-41d4-a716-446655440000"}},
		{AddNode: &AddNode{Addr: "[fe80::1]:1", Token: "x+/="}},
		{AddNode: &AddNode{Addr: "spool-0.spool.default.svc.cluster.local:65535", Token: "t"}},
		{SetNodeAddr: &SetNodeAddr{ID: 1, Addr: "h:1"}},
		spec(func(s *TopicSpec) {
			s.Name = strings.Repeat("a", MaxNameBytes)
			s.Partitions = MaxPartitions
			s.ReplicationFactor = MaxReplicationFactor
		}),
		{AlterTopic: &AlterTopic{Name: "o", RetentionAgeMs: 1, RetentionBytes: 1}},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, tc := range []struct {
		c    Command
		says string
	}{
		{Command{Init: &Init{ClusterID: ""}}, "cluster id"},
		{Command{Init: &Init{ClusterID: "a b"}}, "cluster id"},
		{Command{Init: &Init{ClusterID: strings.Repeat("c", MaxClusterIDBytes+1)}}, "1 to 128 bytes"},
		{Command{AddNode: &AddNode{Addr: "host", Token: "t"}}, "host:port"},
		{Command{AddNode: &AddNode{Addr: ":7946", Token: "t"}}, "host:port"},
		{Command{AddNode: &AddNode{Addr: "h:0", Token: "t"}}, "port 1 to 65535"},
		{Command{AddNode: &AddNode{Addr: "h:65536", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: "h:+1", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: "h:http", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: "h/x:1", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: "[h]:1", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: "[fe80::1%eth0]:1", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: strings.Repeat("h", 254) + ":1", Token: "t"}}, "node address"},
		{Command{AddNode: &AddNode{Addr: "h:1", Token: ""}}, "join token"},
		{Command{AddNode: &AddNode{Addr: "h:1", Token: "a b"}}, "join token"},
		{Command{AddNode: &AddNode{Addr: "h:1", Token: strings.Repeat("t", MaxTokenBytes+1)}}, "join token"},
		{Command{SetNodeAddr: &SetNodeAddr{ID: 0, Addr: "h:1"}}, "node id"},
		{Command{SetNodeAddr: &SetNodeAddr{ID: 1, Addr: "h"}}, "node address"},
		{spec(func(s *TopicSpec) { s.Name = "" }), "topic name"},
		{spec(func(s *TopicSpec) { s.Name = long }), "1 to 200 bytes"},
		{spec(func(s *TopicSpec) { s.Name = "__offsets" }), "not starting with __"},
		{spec(func(s *TopicSpec) { s.Name = GroupsTopic + "x" }), "not starting with __"},
		{spec(func(s *TopicSpec) { s.Name = "__Groups" }), "not starting with __"},
		{spec(func(s *TopicSpec) { s.Name = ".." }), "not . or .."},
		{spec(func(s *TopicSpec) { s.Name = "pay/ments" }), "a-z A-Z 0-9 . _ -"},
		{spec(func(s *TopicSpec) { s.Partitions = 0 }), "between 1 and 4096"},
		{spec(func(s *TopicSpec) { s.Partitions = MaxPartitions + 1 }), "MaxPartitions"},
		{spec(func(s *TopicSpec) { s.ReplicationFactor = 0 }), "between 1 and 7"},
		{spec(func(s *TopicSpec) { s.ReplicationFactor = 8 }), "replication factor"},
		{spec(func(s *TopicSpec) { s.RetentionAgeMs = -1 }), "retention age"},
		{spec(func(s *TopicSpec) { s.RetentionBytes = -1 }), "retention bytes"},
		{Command{AlterTopic: &AlterTopic{Name: "x/y"}}, "topic name"},
		{Command{AlterTopic: &AlterTopic{Name: "o", RetentionBytes: -5}}, "retention bytes"},
		{Command{Init: &Init{ClusterID: "a"}, AlterTopic: &AlterTopic{Name: "o"}}, "sets 2"},
	} {
		err := tc.c.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want ErrInvalid saying %q", tc.c, err, tc.says)
		}
	}
}

// The internal topics are the only "__" names the controller accepts.
func TestInternalTopicAccepted(t *testing.T) {
	s := stateWithNodes(t, 3)
	r := s.Apply(Command{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: GroupsTopic, Partitions: 8, ReplicationFactor: 3}}})
	if r.Err != nil {
		t.Fatalf("create %s: %v", GroupsTopic, r.Err)
	}
	if tp, ok := s.Topic(GroupsTopic); !ok || tp.Pending() {
		t.Fatalf("%s not placed: %+v", GroupsTopic, tp)
	}
	if !IsInternalTopic(GroupsTopic) || IsInternalTopic("__offsets") || IsInternalTopic("groups") {
		t.Fatal("IsInternalTopic names exactly the internal topics")
	}
}

// TestLimits: MaxNodes, MaxTopics and MaxTotalPartitions refuse the command
// past them (pending topics count: they will be placed).
func TestLimits(t *testing.T) {
	s := stateWithNodes(t, MaxNodes)
	if r := s.Apply(Command{AddNode: &AddNode{Addr: "x:1", Token: "one-more"}}); !errors.Is(r.Err, ErrLimit) || !strings.Contains(r.Err.Error(), "MaxNodes") {
		t.Fatalf("node %d: %v, want ErrLimit naming MaxNodes", MaxNodes+1, r.Err)
	}
	if r := s.Apply(Command{AddNode: &AddNode{Addr: "x:1", Token: "t0"}}); r.Err != nil || r.NodeID != 1 {
		t.Fatalf("a retried join at the limit: %+v, want node 1", r)
	}

	s = stateWithNodes(t, 0) // no nodes: every topic stays pending, cheap to create
	for i := range MaxTopics {
		mustApply(t, s, create(fmt.Sprintf("t%05d", i), 1, 1))
	}
	if r := s.Apply(create("over", 1, 1)); !errors.Is(r.Err, ErrLimit) || !strings.Contains(r.Err.Error(), "MaxTopics") {
		t.Fatalf("topic %d: %v, want ErrLimit naming MaxTopics", MaxTopics+1, r.Err)
	}

	s = stateWithNodes(t, 0)
	n := MaxTotalPartitions / MaxPartitions
	for i := range n {
		mustApply(t, s, create(fmt.Sprint("big", i), MaxPartitions, 3))
	}
	left := int32(MaxTotalPartitions - n*MaxPartitions)
	if r := s.Apply(create("over", left+1, 3)); !errors.Is(r.Err, ErrLimit) || !strings.Contains(r.Err.Error(), "MaxTotalPartitions") {
		t.Fatalf("%d partitions more: %v, want ErrLimit naming MaxTotalPartitions", left+1, r.Err)
	}
	mustApply(t, s, create("fits", left, 3))
	// The largest state: every partition placed on 3 nodes. It encodes
	// within MaxStateBytes and decodes again.
	for i := range 3 {
		mustApply(t, s, Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", i), Token: fmt.Sprint(i)}})
	}
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeState(b); err != nil {
		t.Fatal(err)
	}
	if got := len(s.PartitionsOf(1)); got != MaxTotalPartitions {
		t.Fatalf("node 1 holds %d replicas, want %d", got, MaxTotalPartitions)
	}
	t.Logf("state with %d partitions on 3 nodes: %d bytes", MaxTotalPartitions, len(b))
	if reps, leads := spread(s, 0); reps != 0 || leads > 1 {
		t.Fatalf("replica spread %d, leader spread %d", reps, leads)
	}
}

// A join token is bound to the identity of the node it admitted: the same
// token from another certificate (or none) neither takes the node's id nor
// moves its address; the node itself retrying is answered its id.
func TestAddNodeTokenBoundToIdentity(t *testing.T) {
	s := NewState()
	mustApply(t, s, Command{Init: &Init{ClusterID: "c"}})
	const id = "spiffe://td/spool/node-1"
	mustApply(t, s, Command{AddNode: &AddNode{Addr: "a:1", Token: "a", Identity: id}})
	for _, other := range []string{"", "spiffe://td/spool/node-2"} {
		r := s.Apply(Command{AddNode: &AddNode{Addr: "evil:1", Token: "a", Identity: other}})
		if !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("token from identity %q: %+v", other, r)
		}
	}
	if n, _ := s.NodeByToken("a"); n.Addr != "a:1" || n.Identity != id {
		t.Fatalf("node after refused joins: %+v", n)
	}
	if r := mustApply(t, s, Command{AddNode: &AddNode{Addr: "a:2", Token: "a", Identity: id}}); r.NodeID != 1 {
		t.Fatalf("retried join: %+v", r)
	}
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := back.Node(1); n.Identity != id {
		t.Fatalf("identity after a state round trip: %+v", n)
	}
	if err := (Command{AddNode: &AddNode{Addr: "b:1", Token: "b", Identity: "spiffe://td/has space"}}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("identity with a space: %v", err)
	}
}

// WithoutTokens shows no join token and still decodes as a state.
func TestWithoutTokens(t *testing.T) {
	s := NewState()
	mustApply(t, s, Command{Init: &Init{ClusterID: "c"}})
	mustApply(t, s, Command{AddNode: &AddNode{Addr: "a:1", Token: "secret-a"}})
	mustApply(t, s, Command{AddNode: &AddNode{Addr: "b:1", Token: "secret-b"}})
	b, err := EncodeState(s.WithoutTokens())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("secret-")) {
		t.Fatal("a join token in the state shown to non-members")
	}
	back, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := back.Node(2); !ok || n.Addr != "b:1" {
		t.Fatalf("node 2: %+v", n)
	}
	if _, ok := s.NodeByToken("secret-a"); !ok {
		t.Fatal("WithoutTokens changed the state it copied")
	}
}
