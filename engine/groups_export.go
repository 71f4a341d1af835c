package engine

import (
	"errors"

	"github.com/spoolmq/spool/engine/groups/coord"
)

// The consumer-group coordinator's types, re-exported for the sidecar
// (which imports engine only, never its subpackages): the commands
// Node.Coordinate takes, what it and Node.DescribeGroup answer, and the
// refusals to match with errors.Is. docs/groups.md describes them.
type (
	GroupCommand        = coord.Command
	GroupJoin           = coord.Join
	GroupHeartbeat      = coord.Heartbeat
	GroupLeave          = coord.Leave
	GroupExpire         = coord.Expire
	GroupRevokeDone     = coord.RevokeDone
	GroupCommit         = coord.Commit
	GroupReset          = coord.ResetPositions
	GroupPartitionNext  = coord.PartitionNext
	GroupTopic          = coord.Topic
	GroupTopicPartition = coord.TopicPartition
	GroupPosition       = coord.Position
	GroupResult         = coord.Result
	GroupState          = coord.State
	GroupAssignmentOf   = coord.Assignment
	GroupPartitionState = coord.PartitionState
	GroupMember         = coord.Member
)

// Refusals of the coordinator (see coord's sentinels).
var (
	ErrGroupFenced        = coord.ErrFenced
	ErrGroupUnknownMember = coord.ErrUnknownMember
	ErrGroupStaleSession  = coord.ErrStaleSession
	ErrGroupNotRevoking   = coord.ErrNotRevoking
	ErrGroupTopicConflict = coord.ErrTopicConflict
	ErrGroupActive        = coord.ErrGroupActive
	// ErrGroupCommandUnreadable: the coordinator's node could not read the
	// command (COORDINATE_ERROR_INVALID): a node of another release, which
	// does not know a field of it.
	ErrGroupCommandUnreadable = errors.New("engine: the coordinator's node could not read the command")
)

// Coordinator limits and timeouts the sidecar must respect.
const (
	GroupMaxDonePerPosition      = coord.MaxDonePerPosition
	GroupDefaultSessionTimeoutMs = coord.DefaultSessionTimeoutMs
	GroupMinSessionTimeoutMs     = coord.MinSessionTimeoutMs
	GroupMaxSessionTimeoutMs     = coord.MaxSessionTimeoutMs
	GroupDefaultRevokeTimeoutMs  = coord.DefaultRevokeTimeoutMs
	GroupMinRevokeTimeoutMs      = coord.MinRevokeTimeoutMs
	GroupMaxRevokeTimeoutMs      = coord.MaxRevokeTimeoutMs
)

// NewGroupState returns an empty coordinator state: for tests that run the
// coordinator's state machine in process (GroupState.Apply).
func NewGroupState() *GroupState { return coord.NewState() }
