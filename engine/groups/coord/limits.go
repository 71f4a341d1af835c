package coord

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/spoolmq/spool/internal/limits"
)

// Limits of the coordinator's state. They are constants, not settings:
// every replica must refuse exactly the same commands, so a limit a node
// could set for itself would let the replicas' states diverge. Raising one
// is a release change (every node of the cluster on the new release first).
const (
	// MaxGroups is the most groups one coordinator (one partition of the
	// offsets topic) holds, those with members or committed positions. A
	// cluster holds this many times the offsets topic's partitions.
	MaxGroups = 1_000
	// MaxMembersPerGroup is the most members of one group: one per sidecar
	// subscribing, so the most pods one app runs as.
	MaxMembersPerGroup = 256
	// MaxTopicsPerMember is the most topics one member subscribes to.
	MaxTopicsPerMember = 16
	// MaxTopicsPerGroup is the most topics a group's members subscribe to
	// together.
	MaxTopicsPerGroup = 64
	// MaxPartitions is the most partitions of one topic, as the controller
	// allows (internal/limits).
	MaxPartitions = limits.MaxPartitions
	// MaxReplicas is the most replica nodes a Join names for one partition:
	// the most replicas the controller allows (internal/limits
	// MaxReplicationFactor).
	MaxReplicas = limits.MaxReplicationFactor
	// MaxDonePerPosition is the most finished offsets above Next a
	// committed position keeps. A commit is one record of the offsets
	// topic; a sidecar whose window holds more finished offsets above its
	// lowest unfinished one commits the lowest MaxDonePerPosition of them
	// (the others are redelivered after a move and deduplicated by the
	// ledger).
	MaxDonePerPosition = 4096
	// MaxPositionsPerGroup is the most partitions a group keeps committed
	// positions for.
	MaxPositionsPerGroup = 16_384
	// MaxNameBytes is the longest group or topic name (internal/limits),
	// as in the sidecar's config.
	MaxNameBytes = limits.MaxNameBytes
	// MaxMemberIDBytes is the longest member id (a node id of up to 253
	// bytes and a subscription).
	MaxMemberIDBytes = 512
	// MaxSessionBytes is the longest session (incarnation) id.
	MaxSessionBytes = 128
)

// Timeouts a Join may ask for (0 takes the default). docs/groups.md says
// why the defaults fit Kubernetes.
const (
	// DefaultSessionTimeoutMs: a member not heard from for this long is
	// expired and its partitions go to the others at once. A pod killed
	// without warning (kill -9, a node lost) loses its partitions within
	// this; one that is stopped (SIGTERM) leaves at once.
	DefaultSessionTimeoutMs = 10_000
	// MinSessionTimeoutMs is the shortest session timeout: the heartbeat
	// (every tenth of it by default) must get through the offsets topic's
	// raft log, and a leader change of that log takes about a second
	// (election 10 ticks of 100 ms).
	MinSessionTimeoutMs = 3_000
	// MaxSessionTimeoutMs is the longest session timeout.
	MaxSessionTimeoutMs = 300_000
	// DefaultRevokeTimeoutMs: a member that has not answered a revocation
	// for this long is expired. It covers the sidecar handing back its
	// in-flight deliveries of the partition (they are not waited for past
	// the drain budget) and committing.
	DefaultRevokeTimeoutMs = 15_000
	// MinRevokeTimeoutMs and MaxRevokeTimeoutMs bound the revoke timeout.
	MinRevokeTimeoutMs = 1_000
	MaxRevokeTimeoutMs = 300_000
)

// The rules, as they read after "must be" in an error.
const (
	allowedNames   = "1 to 200 bytes of a-z A-Z 0-9 . _ - (the sidecar's rule for topic and group names)"
	allowedMember  = "1 to 512 printable ASCII bytes without spaces (the sidecar's node id and subscription)"
	allowedSession = "1 to 128 printable ASCII bytes without spaces (an id the sidecar draws when it starts)"
)

// validName: 1 to MaxNameBytes bytes of a-z A-Z 0-9 . _ - (the rule of
// internal/limits, the sidecar's config's too).
func validName(s string) bool {
	return len(s) > 0 && len(s) <= MaxNameBytes && limits.ValidNameBytes(s)
}

func validPrintable(s string, limit int) bool {
	if len(s) == 0 || len(s) > limit {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Validate checks what a command says on its own (names, ranges, sizes),
// without the state: a proposer calls it (EncodeCommand does not) to refuse
// a bad request before it takes a place in the log. Apply checks it again,
// and then what depends on the state.
func (c Command) Validate() error {
	if err := c.shape(); err != nil {
		return err
	}
	if c.Checkpoint != nil {
		if c.Group != "" {
			return invalid("group name", c.Group, "empty in a checkpoint (it holds every group)")
		}
		return c.Checkpoint.validate()
	}
	if c.DropTopic != nil {
		if c.Group != "" {
			return invalid("group name", c.Group, "empty in a DropTopic (it is about every group)")
		}
		if !validName(c.DropTopic.Topic) {
			return invalid("topic name", c.DropTopic.Topic, allowedNames)
		}
		if c.AtMs < 0 {
			return invalid("command time", strconv.FormatInt(c.AtMs, 10)+" ms", "0 or more (the coordinator's clock, in ms)")
		}
		return nil
	}
	if !validName(c.Group) {
		return invalid("group name", c.Group, allowedNames)
	}
	if c.AtMs < 0 {
		return invalid("command time", strconv.FormatInt(c.AtMs, 10)+" ms", "0 or more (the coordinator's clock, in ms)")
	}
	switch {
	case c.Join != nil:
		return validateJoin(c.Join)
	case c.Heartbeat != nil:
		return cmpErr(validateMember(c.Heartbeat.Member), validateSession(c.Heartbeat.Session))
	case c.Leave != nil:
		return cmpErr(validateMember(c.Leave.Member), validateSession(c.Leave.Session))
	case c.Expire != nil:
		return validateMember(c.Expire.Member)
	case c.RevokeDone != nil:
		return validateRevokeDone(c.RevokeDone)
	case c.Reset != nil:
		return validateReset(c.Reset)
	case c.Commit != nil:
		m := c.Commit
		if err := validateMember(m.Member); err != nil {
			return err
		}
		if m.Generation == 0 {
			return invalid("generation", "0", "the generation of the member's assignment (1 up)")
		}
		if err := validateTP(m.TopicPartition); err != nil {
			return err
		}
		return validatePosition(m.Position)
	}
	return nil
}

func validateMember(id string) error {
	if !validPrintable(id, MaxMemberIDBytes) {
		return invalid("member id", id, allowedMember)
	}
	return nil
}

func validateSession(s string) error {
	if !validPrintable(s, MaxSessionBytes) {
		return invalid("session", s, allowedSession)
	}
	return nil
}

func validateJoin(j *Join) error {
	if err := cmpErr(validateMember(j.Member), validateSession(j.Session)); err != nil {
		return err
	}
	if len(j.Topics) == 0 || len(j.Topics) > MaxTopicsPerMember {
		return invalid("topics", strconv.Itoa(len(j.Topics)), fmt.Sprintf("1 to %d topics (MaxTopicsPerMember)", MaxTopicsPerMember))
	}
	for i, t := range j.Topics {
		if err := validateTopic(t); err != nil {
			return err
		}
		if slices.ContainsFunc(j.Topics[:i], func(o Topic) bool { return o.Name == t.Name }) {
			return invalid("topics", t.Name, "distinct topic names (this one is named twice)")
		}
	}
	if v := j.SessionTimeoutMs; v != 0 && (v < MinSessionTimeoutMs || v > MaxSessionTimeoutMs) {
		return invalid("session timeout", strconv.FormatInt(v, 10)+" ms", fmt.Sprintf("0 (the default, %d ms) or between %d and %d ms", DefaultSessionTimeoutMs, MinSessionTimeoutMs, MaxSessionTimeoutMs))
	}
	if v := j.RevokeTimeoutMs; v != 0 && (v < MinRevokeTimeoutMs || v > MaxRevokeTimeoutMs) {
		return invalid("revoke timeout", strconv.FormatInt(v, 10)+" ms", fmt.Sprintf("0 (the default, %d ms) or between %d and %d ms", DefaultRevokeTimeoutMs, MinRevokeTimeoutMs, MaxRevokeTimeoutMs))
	}
	return nil
}

func validateRevokeDone(r *RevokeDone) error {
	if err := validateMember(r.Member); err != nil {
		return err
	}
	if r.Generation == 0 {
		return invalid("generation", "0", "the generation of the member's assignment (1 up)")
	}
	if len(r.Partitions) == 0 || len(r.Partitions) > MaxTopicsPerMember*MaxPartitions {
		return invalid("partitions", strconv.Itoa(len(r.Partitions)), "at least one partition the member was asked to revoke")
	}
	for i, tp := range r.Partitions {
		if err := validateTP(tp); err != nil {
			return err
		}
		if slices.Contains(r.Partitions[:i], tp) {
			return invalid("partitions", fmt.Sprintf("%s/%d", tp.Topic, tp.Partition), "distinct partitions (this one is named twice)")
		}
	}
	return nil
}

func validateReset(r *ResetPositions) error {
	if !validName(r.Topic) {
		return invalid("topic name", r.Topic, allowedNames)
	}
	if len(r.Next) == 0 || len(r.Next) > MaxPartitions {
		return invalid("positions", strconv.Itoa(len(r.Next)), fmt.Sprintf("1 to %d partitions (MaxPartitions)", MaxPartitions))
	}
	for i, pn := range r.Next {
		if err := validateTP(TopicPartition{r.Topic, pn.Partition}); err != nil {
			return err
		}
		if pn.Next < 0 {
			return invalid("position", strconv.FormatInt(pn.Next, 10), "an offset (0 or more)")
		}
		if i > 0 && pn.Partition <= r.Next[i-1].Partition {
			return invalid("positions", fmt.Sprintf("partition %d after %d", pn.Partition, r.Next[i-1].Partition), "partitions in ascending order, each once")
		}
	}
	return nil
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func validateTopic(t Topic) error {
	if !validName(t.Name) {
		return invalid("topic name", t.Name, allowedNames)
	}
	if t.Partitions < 1 || t.Partitions > MaxPartitions {
		return invalid(fmt.Sprintf("topic %q partitions", t.Name), strconv.Itoa(int(t.Partitions)), fmt.Sprintf("between 1 and %d (MaxPartitions)", MaxPartitions))
	}
	if t.Replicas == nil {
		return nil
	}
	if len(t.Replicas) != int(t.Partitions) {
		return invalid(fmt.Sprintf("topic %q replicas", t.Name), strconv.Itoa(len(t.Replicas))+" lists", fmt.Sprintf("none, or one list per partition (%d)", t.Partitions))
	}
	for p, r := range t.Replicas {
		if len(r) > MaxReplicas {
			return invalid(fmt.Sprintf("topic %q partition %d replicas", t.Name, p), fmt.Sprint(r), fmt.Sprintf("at most %d node ids", MaxReplicas))
		}
		for i, id := range r {
			if id == 0 || slices.Contains(r[:i], id) {
				return invalid(fmt.Sprintf("topic %q partition %d replicas", t.Name, p), fmt.Sprint(r), "distinct node ids (1 up)")
			}
		}
	}
	return nil
}

func validateTP(tp TopicPartition) error {
	if !validName(tp.Topic) {
		return invalid("topic name", tp.Topic, allowedNames)
	}
	if tp.Partition < 0 || tp.Partition >= MaxPartitions {
		return invalid(fmt.Sprintf("topic %q partition", tp.Topic), strconv.Itoa(int(tp.Partition)), fmt.Sprintf("between 0 and %d", MaxPartitions-1))
	}
	return nil
}

func validatePosition(p Position) error {
	if p.Next < 0 {
		return invalid("position", strconv.FormatInt(p.Next, 10), "a next offset of 0 or more")
	}
	if len(p.Done) > MaxDonePerPosition {
		return invalid("position", fmt.Sprintf("%d finished offsets", len(p.Done)), fmt.Sprintf("at most %d finished offsets above next (MaxDonePerPosition): commit the lowest ones", MaxDonePerPosition))
	}
	prev := p.Next
	for _, d := range p.Done {
		if d <= prev {
			return invalid("position", fmt.Sprintf("next %d, finished %v", p.Next, p.Done), "finished offsets above next, strictly ascending")
		}
		prev = d
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
	return fmt.Sprintf("coord: %s %q is invalid: must be %s", e.Field, e.Value, e.Allowed)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, value, allowed string) error {
	return &InvalidError{Field: field, Value: value, Allowed: allowed}
}
