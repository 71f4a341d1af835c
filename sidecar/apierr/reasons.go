package apierr

import "google.golang.org/grpc/codes"

// Reason is a stable, machine-readable cause of a failure: clients may
// match on it, so a reason is never renamed or given another code. Add new
// ones to the table in lookup and to docs/errors.md.
type Reason string

// The catalogue. Codes follow gRPC's guidance (grpc.io/docs/guides/status-codes):
//   - INVALID_ARGUMENT for a request that will fail the same way however
//     often it is sent: malformed, or over a configured limit of one
//     message or one request. Limits are INVALID_ARGUMENT, not
//     RESOURCE_EXHAUSTED: RESOURCE_EXHAUSTED tells clients and proxies that
//     a shared resource ran out and that backing off may help (Google's
//     client libraries retry it), while an oversized message never fits.
//   - RESOURCE_EXHAUSTED only for a resource of the node that is used up
//     and can come back: the disk.
//   - NOT_FOUND for names the configuration does not declare;
//     FAILED_PRECONDITION for a request that is valid but not in the
//     current state; UNAVAILABLE for "retry, the same request can succeed".
const (
	// INVALID_ARGUMENT: the request's form.
	InvalidRequest      Reason = "INVALID_REQUEST"
	TopicRequired       Reason = "TOPIC_REQUIRED"
	InvalidTopicName    Reason = "INVALID_TOPIC_NAME"
	NoMessages          Reason = "NO_MESSAGES"
	BatchTooLarge       Reason = "BATCH_TOO_LARGE"
	MessageTooLarge     Reason = "MESSAGE_TOO_LARGE"
	KeyTooLarge         Reason = "KEY_TOO_LARGE"
	IDTooLarge          Reason = "ID_TOO_LARGE"
	TooManyHeaders      Reason = "TOO_MANY_HEADERS"
	HeadersTooLarge     Reason = "HEADERS_TOO_LARGE"
	InvalidHeaderName   Reason = "INVALID_HEADER_NAME"
	ReservedHeader      Reason = "RESERVED_HEADER"
	BadPartition        Reason = "BAD_PARTITION"
	ResetTargetRequired Reason = "RESET_TARGET_REQUIRED"
	StartRequired       Reason = "START_REQUIRED"
	StartRepeated       Reason = "START_REPEATED"
	// InvalidTopicSpec: a topic to create or alter with impossible settings
	// (no partitions, too many, past the node's partition or open-file
	// budget, negative retention).
	InvalidTopicSpec Reason = "INVALID_TOPIC_SPEC"
	// InvalidCursor: a dead-letter cursor spoold did not make, or made for
	// another subscription.
	InvalidCursor Reason = "INVALID_CURSOR"
	// InvalidReplicas: a replica move naming not as many nodes as the
	// topic's replication factor, or a node twice.
	InvalidReplicas Reason = "INVALID_REPLICAS"
	// InvalidSchedule: a publish's delivery time that cannot be kept
	// (both deliver_at_ms and deliver_after_ms, a negative or too short
	// delay, a time more than a year ahead; docs/scheduling.md).
	InvalidSchedule Reason = "INVALID_SCHEDULE"

	// NOT_FOUND: names the configuration does not declare.
	UnknownTopic        Reason = "UNKNOWN_TOPIC"
	UnknownGroup        Reason = "UNKNOWN_GROUP"
	UnknownSubscription Reason = "UNKNOWN_SUBSCRIPTION"
	// UnknownScheduled: CancelScheduled of an id the topic holds no
	// scheduled message with (never published, removed by retention, or
	// published without a delivery time).
	UnknownScheduled Reason = "UNKNOWN_SCHEDULED_MESSAGE"

	// FAILED_PRECONDITION: valid, but not now or not this way.
	TopicConflict      Reason = "TOPIC_CONFLICT"
	ConsumersConnected Reason = "CONSUMERS_CONNECTED"
	WrongDeliveryMode  Reason = "WRONG_DELIVERY_MODE"
	// TopicExists: CreateTopic of a name that exists with other settings.
	TopicExists Reason = "TOPIC_EXISTS"
	// TopicDeclared: AlterTopic or DeleteTopic of a topic spoold's config
	// declares (the config would undo it at the next start).
	TopicDeclared Reason = "TOPIC_DECLARED"
	// TopicInUse: DeleteTopic of a topic a subscription reads or
	// dead-letters to (on a cluster: that a consumer group's member
	// subscribes to).
	TopicInUse Reason = "TOPIC_IN_USE"
	// TopicDeleteUnsupported: the topic cannot be deleted here (an
	// internal topic, or a cluster sidecar with storage off).
	TopicDeleteUnsupported Reason = "TOPIC_DELETE_UNSUPPORTED"
	// UnknownNode: a node id the cluster does not have.
	UnknownNode Reason = "UNKNOWN_NODE"
	// DecommissionRefused: the node cannot leave (the rest would be too
	// few for a topic's replication factor), or the sidecar asked is not a
	// cluster member.
	DecommissionRefused Reason = "DECOMMISSION_REFUSED"
	// MoveRefused: a replica move the cluster cannot make now (a node
	// named is down or leaving, the topic waits for nodes), or asked of a
	// sidecar that is not a cluster member.
	MoveRefused Reason = "MOVE_REFUSED"
	// ClusterVersion: the cluster version cannot be finalized (a node runs
	// a release that does not speak a higher one, or is unreachable; or
	// there is nothing to finalize), or the sidecar asked is not a member;
	// or what was asked needs a cluster version the cluster is not
	// finalized at yet (scheduled delivery).
	ClusterVersion Reason = "CLUSTER_VERSION"
	// BackendUnsupported: the storage backend does not offer the operation
	// (an embedded-cluster operation asked of a sidecar whose messages live
	// in a broker).
	BackendUnsupported Reason = "BACKEND_UNSUPPORTED"
	// PartitionQuarantined: the partition's log is damaged; it serves what
	// precedes the damage and takes no appends until repaired.
	PartitionQuarantined Reason = "PARTITION_QUARANTINED"
	// SchedulePastRetention: a delivery time the topic's retention would
	// delete the message before.
	SchedulePastRetention Reason = "SCHEDULE_PAST_RETENTION"
	// ScheduleDue: CancelScheduled of a message whose time has come: it is
	// being or has been delivered.
	ScheduleDue Reason = "SCHEDULE_DUE"

	// OUT_OF_RANGE.
	OffsetOutOfRange Reason = "OFFSET_OUT_OF_RANGE"

	// UNAUTHENTICATED, PERMISSION_DENIED and RESOURCE_EXHAUSTED for an app
	// (sidecar/apps): who it is, what its scopes allow, how fast it may
	// publish.
	Unauthenticated     Reason = "UNAUTHENTICATED"
	PublishNotAllowed   Reason = "PUBLISH_NOT_ALLOWED"
	SubscribeNotAllowed Reason = "SUBSCRIBE_NOT_ALLOWED"
	// RateLimited: the app's publish rate (apps.publish_rate) is used up
	// for now; ErrorInfo metadata retry_after_ms says when it is not.
	RateLimited Reason = "RATE_LIMITED"

	// RESOURCE_EXHAUSTED.
	DiskFull Reason = "DISK_FULL"

	// UNAVAILABLE: retry; the same request can succeed.
	ShuttingDown      Reason = "SHUTTING_DOWN"
	NotLeader         Reason = "NOT_LEADER"
	LedgerUnavailable Reason = "LEDGER_UNAVAILABLE"
	// NoLeader: no leader of the partition was found or reached in time
	// (a majority of its replicas is down or cut off).
	NoLeader Reason = "NO_LEADER"
	// TopicNotPlaced: the cluster has fewer nodes than the topic's
	// replication factor, so its partitions have no replicas yet.
	TopicNotPlaced Reason = "TOPIC_NOT_PLACED"

	// UNKNOWN: a publish that may or may not be stored.
	OutcomeUnknown Reason = "OUTCOME_UNKNOWN"

	// The caller's own context.
	Cancelled        Reason = "CANCELLED"
	DeadlineExceeded Reason = "DEADLINE_EXCEEDED"

	// INTERNAL: a bug or an environment failure; spoold logs it.
	Internal Reason = "INTERNAL"
)

// entry is what the catalogue knows of a reason.
type entry struct {
	code  codes.Code
	retry bool   // see Retryable
	hint  string // what to do, added to engine and ledger errors that lack it
}

// lookup is the catalogue's table.
func lookup(r Reason) (entry, bool) {
	const (
		fix   = false
		retry = true
	)
	switch r {
	case InvalidRequest, TopicRequired, InvalidTopicName, NoMessages, BatchTooLarge,
		MessageTooLarge, KeyTooLarge, IDTooLarge, TooManyHeaders, HeadersTooLarge,
		InvalidHeaderName, ReservedHeader, ResetTargetRequired, StartRequired, StartRepeated, InvalidTopicSpec:
		return entry{codes.InvalidArgument, fix, ""}, true
	case InvalidCursor:
		return entry{codes.InvalidArgument, fix, "pass the next_cursor of the previous page unchanged, or none to start over"}, true
	case InvalidSchedule:
		return entry{codes.InvalidArgument, fix, "docs/scheduling.md gives the horizon of a scheduled message"}, true
	case UnknownScheduled:
		return entry{codes.NotFound, fix, "spool scheduled list TOPIC shows the scheduled messages not yet due"}, true
	case ScheduleDue:
		return entry{codes.FailedPrecondition, fix, "a scheduled message can be cancelled only before its time"}, true
	case SchedulePastRetention:
		return entry{codes.FailedPrecondition, fix, "schedule the message sooner than the topic's retention, or raise the topic's retention"}, true
	case InvalidReplicas:
		return entry{codes.InvalidArgument, fix, "name as many distinct nodes as the topic's replication factor, the preferred leader first"}, true
	case BadPartition:
		return entry{codes.InvalidArgument, fix, "leave partition unset to let the key choose, or use a partition the topic has"}, true
	case UnknownTopic, UnknownGroup, UnknownSubscription:
		return entry{codes.NotFound, fix, ""}, true
	case UnknownNode:
		return entry{codes.NotFound, fix, "spool cluster status lists the nodes and their ids"}, true
	case DecommissionRefused, MoveRefused:
		return entry{codes.FailedPrecondition, fix, ""}, true
	case ClusterVersion:
		return entry{codes.FailedPrecondition, fix, "spool cluster status shows each node's release and cluster versions; docs/upgrading.md"}, true
	case BackendUnsupported:
		return entry{codes.FailedPrecondition, fix, "docs/backends.md lists what each storage backend offers"}, true
	case TopicConflict, ConsumersConnected, WrongDeliveryMode, TopicExists, TopicDeclared, TopicInUse, TopicDeleteUnsupported:
		return entry{codes.FailedPrecondition, fix, ""}, true
	case PartitionQuarantined:
		return entry{codes.FailedPrecondition, fix, "the partition's log is damaged: repair it (docs/operations.md), or publish without a key or partition that maps to it"}, true
	case OffsetOutOfRange:
		return entry{codes.OutOfRange, fix, "the offset is outside what the partition retains: start from the log start or end"}, true
	case Unauthenticated:
		return entry{codes.Unauthenticated, fix, "send \"authorization: Bearer <token>\" with a token of spoold's apps.tokens_file, or reach the sidecar on its Unix socket"}, true
	case PublishNotAllowed, SubscribeNotAllowed:
		return entry{codes.PermissionDenied, fix, "the app's scopes in spoold's apps.identities do not allow it: widen them, or use another identity"}, true
	case RateLimited:
		return entry{codes.ResourceExhausted, retry, "retry after retry_after_ms (ErrorInfo metadata) with the same message ids, or raise the identity's publish_rate"}, true
	case DiskFull:
		return entry{codes.ResourceExhausted, retry, "free disk space on spoold's data_dir (or shorten retention), then retry with the same message ids"}, true
	case ShuttingDown:
		return entry{codes.Unavailable, retry, "spoold is shutting down: retry against the restarted sidecar (with the same message ids when publishing)"}, true
	case NotLeader:
		return entry{codes.Unavailable, retry, "retry shortly with the same message ids"}, true
	case LedgerUnavailable:
		return entry{codes.Unavailable, retry, "retry once Redis answers again (spool_ledger_available is 1)"}, true
	case NoLeader:
		return entry{codes.Unavailable, retry, "a majority of the partition's replicas must be running and reachable: start the stopped spoold, then retry with the same message ids"}, true
	case TopicNotPlaced:
		return entry{codes.Unavailable, retry, "start more spoold with --join (or lower cluster.replication_factor), then retry"}, true
	case OutcomeUnknown:
		return entry{codes.Unknown, retry, "the messages may or may not be stored: retry with the same message ids (consumers dedupe by id)"}, true
	case Cancelled:
		return entry{codes.Canceled, fix, ""}, true
	case DeadlineExceeded:
		return entry{codes.DeadlineExceeded, retry, "retry with a longer deadline (with the same message ids when publishing)"}, true
	case Internal:
		return entry{codes.Internal, fix, "this is a bug or a failure of spoold's machine: see spoold's log, and report it if it is a bug"}, true
	}
	return entry{}, false
}

func lookupHint(r Reason) string {
	e, _ := lookup(r)
	return e.hint
}

// Code returns the reason's gRPC code (INTERNAL for a reason outside the
// catalogue).
func (r Reason) Code() codes.Code {
	if e, ok := lookup(r); ok {
		return e.code
	}
	return codes.Internal
}

// Retryable reports whether sending the same request again, unchanged,
// can succeed. It is true only where the cause is outside the request and
// passes by itself or by an operator's action that does not involve the
// client: a full disk freed, a restarted or re-elected node, Redis back,
// a publish whose outcome is unknown (retried with the same ids, which
// consumers dedupe), a deadline too short. Everything about the request
// itself (form, limits, names, state like connected consumers) is not
// retryable: the client must change something first. INTERNAL is not
// retryable: retrying a bug hides it.
func (r Reason) Retryable() bool {
	e, _ := lookup(r)
	return e.retry
}

// All returns every reason of the catalogue, in the order of docs/errors.md.
func All() []Reason {
	return []Reason{
		InvalidRequest, TopicRequired, InvalidTopicName, NoMessages, BatchTooLarge,
		MessageTooLarge, KeyTooLarge, IDTooLarge, TooManyHeaders, HeadersTooLarge,
		InvalidHeaderName, ReservedHeader, BadPartition, ResetTargetRequired, StartRequired, StartRepeated,
		InvalidTopicSpec, InvalidCursor, InvalidReplicas, InvalidSchedule,
		UnknownTopic, UnknownGroup, UnknownSubscription, UnknownScheduled,
		TopicConflict, ConsumersConnected, WrongDeliveryMode, PartitionQuarantined, SchedulePastRetention, ScheduleDue,
		TopicExists, TopicDeclared, TopicInUse, TopicDeleteUnsupported, UnknownNode, DecommissionRefused, MoveRefused, ClusterVersion, BackendUnsupported,
		OffsetOutOfRange,
		Unauthenticated, PublishNotAllowed, SubscribeNotAllowed, RateLimited,
		DiskFull,
		ShuttingDown, NotLeader, LedgerUnavailable, NoLeader, TopicNotPlaced,
		OutcomeUnknown,
		Cancelled, DeadlineExceeded,
		Internal,
	}
}
