// Package limits defines the bounds of a topic, and the bytes its name may
// use, that more than one part of Spool enforces: the controller's state machine (engine/meta), the
// consumer-group coordinator (engine/groups/coord), the engine's API (which
// re-exports them) and the sidecar's config (sidecar/config). Each is
// defined here once, so that the controller, the coordinator and the
// config can never disagree about what a topic may be.
//
// It is not in package engine because engine imports engine/groups/coord
// (to re-export the coordinator's types), so coord cannot import engine,
// and because sidecar/config is a leaf that must not import the engine. It
// imports nothing, and must not: anything of Spool's may import it.
//
// They are constants, not settings: every replica must refuse exactly the
// same commands, so raising one is a release change (every node of the
// cluster on the new release first).
package limits

const (
	// MaxPartitions is the most partitions of one topic. Each partition is
	// a raft group with ReplicationFactor replicas; 4096 partitions of RF 3
	// on 3 nodes are 4096 replicas per node, four times the 1,000 idle
	// replicas a node is measured with (docs/benchmarks.md), and a topic
	// needing more parallelism than that is better split.
	MaxPartitions = 4096
	// MaxReplicationFactor is the most replicas of one partition. Raft
	// groups past 7 voters commit slower and tolerate more failures than
	// any deployment needs.
	MaxReplicationFactor = 7
	// MaxNameBytes is the longest topic or consumer group name.
	MaxNameBytes = 200
)

// ValidNameBytes reports whether s uses only the bytes allowed in topic,
// group and node names: a-z A-Z 0-9 . _ -. (The length, and the prefix
// "__" kept for internal topics, each user checks with its own message.)
func ValidNameBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}
