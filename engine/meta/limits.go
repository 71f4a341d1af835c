package meta

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spoolmq/spool/internal/limits"
)

// Limits of the controller's state. They are constants, not settings: every
// node must refuse exactly the same commands, so a limit a node could set
// for itself would let the nodes' states diverge. Raising one is a release
// change (every node of the cluster on the new release first).
const (
	// MaxNodes is the most nodes a cluster holds. Every node is a member of
	// group 0 (a voter or a learner), and engine/raft's state file holds at
	// most 256 ids of one ConfState (MaxConfStateIDs), a joint configuration
	// listing some twice; 128 leaves that room, and the controller leader
	// replicates every command to every node.
	MaxNodes = 128
	// MaxTopics is the most topics a cluster holds.
	MaxTopics = 10_000
	// MaxPartitions is the most partitions of one topic
	// (internal/limits says why). The sidecar makes topics of at most
	// 1024 partitions (sidecar/config.MaxPartitions), from its config file
	// or AdminService.CreateTopic; the engine's internal topics (the groups'
	// coordinators, embedded.ClusterConfig.GroupsPartitions) may have up to
	// this.
	MaxPartitions = limits.MaxPartitions
	// MaxTotalPartitions is the most partitions of all topics together,
	// pending ones included (what placement may yet add): it bounds the
	// state (a snapshot of it) to a few MiB.
	MaxTotalPartitions = 100_000
	// MaxReplicationFactor is the most replicas of one partition
	// (internal/limits).
	MaxReplicationFactor = limits.MaxReplicationFactor
	// MaxControllerVoters is how many nodes vote in group 0 (the lowest
	// ids); the others are learners.
	MaxControllerVoters = 3
	// MaxMovesInFlight is how many partitions NextMove lets move at once:
	// each move copies a whole partition log to a new node, so a node that
	// dies does not start thousands of copies together.
	MaxMovesInFlight = 8
	// MaxNameBytes is the longest topic name (internal/limits), as in
	// the sidecar's config.
	MaxNameBytes = limits.MaxNameBytes
	// MaxClusterIDBytes is the longest cluster id.
	MaxClusterIDBytes = 128
	// MaxAddrBytes is the longest node address (a 253-byte host name, the
	// brackets of an IPv6 address, a colon and a port fit).
	MaxAddrBytes = 300
	// MaxTokenBytes is the longest join token.
	MaxTokenBytes = 128
	// MaxIdentityBytes is the longest node identity (a certificate's URI
	// SAN; engine/cluster/peerauth.MaxIdentityBytes).
	MaxIdentityBytes = 512
)

// The rules, as they read after "must be" in an error.
const (
	allowedNames     = "1 to 200 bytes of a-z A-Z 0-9 . _ -, not starting with __ (reserved for internal topics), not . or .."
	allowedClusterID = "1 to 128 bytes of a-z A-Z 0-9 . _ -"
	allowedAddr      = "host:port peers can dial: a host name (a-z A-Z 0-9 . _ -, at most 253 bytes) or an IP address ([ ] around IPv6), and a port 1 to 65535"
	allowedToken     = "1 to 128 printable ASCII bytes without spaces"
	allowedIdentity  = "empty or up to 512 printable ASCII bytes without spaces (a URI)"
)

// GroupsTopic is the internal topic holding the consumer groups'
// coordinators (docs/groups.md, "Running on the cluster"). Only the engine
// creates it: engine.EnsureTopic and the sidecar refuse names starting
// with "__" from users, and this package accepts exactly the internal
// names.
const GroupsTopic = "__groups"

// IsInternalTopic reports whether name is one of the engine's internal
// topics, the only names starting with "__" the controller accepts.
func IsInternalTopic(name string) bool { return name == GroupsTopic }

// validTopicName is the sidecar's rule for topic names (sidecar/config
// validName; the bytes are internal/limits.ValidNameBytes, shared with
// it); keep the length and prefix checks the same as there. Names must
// also be unique ignoring case (checked by Apply against the topics that
// exist).
func validTopicName(s string) bool {
	if IsInternalTopic(s) {
		return true
	}
	if len(s) == 0 || len(s) > MaxNameBytes || strings.HasPrefix(s, "__") || s == "." || s == ".." {
		return false
	}
	return validNameBytes(s)
}

// validNameBytes: only a-z A-Z 0-9 . _ - (internal/limits).
func validNameBytes(s string) bool { return limits.ValidNameBytes(s) }

func validClusterID(s string) bool {
	return len(s) > 0 && len(s) <= MaxClusterIDBytes && validNameBytes(s)
}

// validIdentity: empty (no TLS) or a URI SAN of printable ASCII.
func validIdentity(s string) bool { return s == "" || (len(s) <= MaxIdentityBytes && validToken(s)) }

func validToken(s string) bool {
	if len(s) == 0 || len(s) > MaxTokenBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validAddr accepts host:port that a peer can dial: a non-empty host (an IP
// address, or a host name of a-z A-Z 0-9 . _ -) and a numeric port 1..65535.
func validAddr(a string) bool {
	if len(a) == 0 || len(a) > MaxAddrBytes {
		return false
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
		return false
	}
	if net.ParseIP(host) != nil {
		return true // SplitHostPort demands brackets around IPv6
	}
	return len(host) <= 253 && validNameBytes(host) && !strings.Contains(a, "[")
}

// Validate checks what a command says on its own (names, ranges, address
// syntax), without the state: a proposer calls it (EncodeCommand does not)
// to refuse a bad request before it takes a place in group 0's log. Apply
// checks it again, and then what depends on the state.
func (c Command) Validate() error {
	if err := c.shape(); err != nil {
		return err
	}
	switch {
	case c.Init != nil:
		if !validClusterID(c.Init.ClusterID) {
			return invalid("cluster id", c.Init.ClusterID, allowedClusterID)
		}
	case c.AddNode != nil:
		if !validAddr(c.AddNode.Addr) {
			return invalid("node address", c.AddNode.Addr, allowedAddr)
		}
		if !validToken(c.AddNode.Token) {
			return invalid("join token", c.AddNode.Token, allowedToken)
		}
		if !validIdentity(c.AddNode.Identity) {
			return invalid("node identity", c.AddNode.Identity, allowedIdentity)
		}
	case c.SetNodeAddr != nil:
		if c.SetNodeAddr.ID == 0 {
			return invalid("node id", "0", "a node id (1 up)")
		}
		if !validAddr(c.SetNodeAddr.Addr) {
			return invalid("node address", c.SetNodeAddr.Addr, allowedAddr)
		}
	case c.CreateTopic != nil:
		return validateSpec(c.CreateTopic.Spec)
	case c.MoveReplicas != nil:
		if c.MoveReplicas.Group == 0 {
			return invalid("group id", "0", "a partition's group (1 up; 0 is the controller)")
		}
		if len(c.MoveReplicas.Replicas) == 0 || len(c.MoveReplicas.Replicas) > MaxReplicationFactor {
			return invalid("move target", fmt.Sprint(c.MoveReplicas.Replicas), fmt.Sprintf("1 to %d node ids (MaxReplicationFactor)", MaxReplicationFactor))
		}
	case c.FinishMove != nil:
		if c.FinishMove.Group == 0 {
			return invalid("group id", "0", "a partition's group (1 up; 0 is the controller)")
		}
		if len(c.FinishMove.Replicas) == 0 || len(c.FinishMove.Replicas) > MaxReplicationFactor {
			return invalid("move target", fmt.Sprint(c.FinishMove.Replicas), fmt.Sprintf("1 to %d node ids (MaxReplicationFactor)", MaxReplicationFactor))
		}
	case c.SetNodeDown != nil:
		if c.SetNodeDown.ID == 0 {
			return invalid("node id", "0", "a node id (1 up)")
		}
	case c.DecommissionNode != nil:
		if c.DecommissionNode.ID == 0 {
			return invalid("node id", "0", "a node id (1 up)")
		}
	case c.RemoveNode != nil:
		if c.RemoveNode.ID == 0 {
			return invalid("node id", "0", "a node id (1 up)")
		}
	case c.DropDamaged != nil:
		if c.DropDamaged.Group == 0 {
			return invalid("group id", "0", "a partition's group (1 up; 0 is the controller)")
		}
		if c.DropDamaged.Node == 0 {
			return invalid("node id", "0", "a node id (1 up)")
		}
	case c.FinalizeVersion != nil:
		return c.FinalizeVersion.validate()
	case c.DeleteTopic != nil:
		if IsInternalTopic(c.DeleteTopic.Name) {
			return &InvalidError{Field: "topic name", Value: c.DeleteTopic.Name, Allowed: "a topic of the cluster's users: internal topics (" + GroupsTopic + ") are the engine's and cannot be deleted"}
		}
		if !validTopicName(c.DeleteTopic.Name) {
			return invalid("topic name", c.DeleteTopic.Name, allowedNames)
		}
	case c.AlterTopic != nil:
		if !validTopicName(c.AlterTopic.Name) {
			return invalid("topic name", c.AlterTopic.Name, allowedNames)
		}
		return validateRetention(c.AlterTopic.Name, c.AlterTopic.RetentionAgeMs, c.AlterTopic.RetentionBytes)
	}
	return nil
}

func validateSpec(s TopicSpec) error {
	if !validTopicName(s.Name) {
		return invalid("topic name", s.Name, allowedNames)
	}
	if s.Partitions < 1 || s.Partitions > MaxPartitions {
		return invalid(fmt.Sprintf("topic %q partitions", s.Name), strconv.Itoa(int(s.Partitions)), fmt.Sprintf("between 1 and %d (MaxPartitions)", MaxPartitions))
	}
	if s.ReplicationFactor < 1 || s.ReplicationFactor > MaxReplicationFactor {
		return invalid(fmt.Sprintf("topic %q replication factor", s.Name), strconv.Itoa(int(s.ReplicationFactor)), fmt.Sprintf("between 1 and %d (MaxReplicationFactor); 3 is the usual choice", MaxReplicationFactor))
	}
	return validateRetention(s.Name, s.RetentionAgeMs, s.RetentionBytes)
}

func validateRetention(name string, ageMs, bytes int64) error {
	if ageMs < 0 {
		return invalid(fmt.Sprintf("topic %q retention age", name), strconv.FormatInt(ageMs, 10)+" ms", "0 (forever) or a positive number of milliseconds")
	}
	if bytes < 0 {
		return invalid(fmt.Sprintf("topic %q retention bytes", name), strconv.FormatInt(bytes, 10), "0 (unlimited) or a positive number of bytes")
	}
	return nil
}

// InvalidError says which value of a command breaks which rule. It matches
// ErrInvalid with errors.Is.
type InvalidError struct {
	// Field names the value, like `topic "orders" partitions`.
	Field string
	// Value is the offending value as text.
	Value string
	// Allowed says what would be accepted; it reads after "must be".
	Allowed string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("meta: %s %q is invalid: must be %s", e.Field, e.Value, e.Allowed)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, value, allowed string) error {
	return &InvalidError{Field: field, Value: value, Allowed: allowed}
}
