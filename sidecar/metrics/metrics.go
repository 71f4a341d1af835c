// Package metrics defines every Prometheus metric spoold exports. Nothing
// here is package-level state: New registers the collectors on the registry
// it is given, and components receive the *Metrics they use.
//
// docs/metrics.md lists every metric with its labels and meaning; a test
// checks that the two agree.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spoolmq/spool/internal/buildinfo"
)

// Metrics holds spoold's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	PublishMessages    *prometheus.CounterVec   // topic
	PublishBytes       *prometheus.CounterVec   // topic
	PublishRejected    *prometheus.CounterVec   // topic (declared or publish.OtherTopic), reason (apierr)
	PublishLatency     *prometheus.HistogramVec // topic
	PublishMemory      prometheus.Gauge
	PublishMemoryLimit prometheus.Gauge
	// MemoryLimit is the Go runtime's soft memory limit (node.memory_limit
	// or GOMEMLIMIT; 0: none).
	MemoryLimit        prometheus.Gauge
	PublishMemoryWaits prometheus.Counter
	// PublishMemoryRefused: requests that got no room before they ended.
	PublishMemoryRefused prometheus.Counter
	// Apps (sidecar/apps): refusals by identity and reason, and what each
	// identity's publish buckets hold.
	AppDenied     *prometheus.CounterVec // app, reason
	AppRateTokens *prometheus.GaugeVec   // app, kind (messages, bytes)
	// LogSyncs counts the embedded log's syncs (spool_log_syncs_total).
	LogSyncs *LogSyncs

	// SubscribeRefused: Subscribe streams refused at Start, by reason.
	SubscribeRefused *prometheus.CounterVec // reason

	Deliveries     *prometheus.CounterVec   // group, topic
	Settlements    *prometheus.CounterVec   // group, topic, outcome
	Redeliveries   *prometheus.CounterVec   // group, topic
	LeaseExpiries  *prometheus.CounterVec   // group, topic
	DeadLettered   *prometheus.CounterVec   // group, topic, reason
	SettleErrors   *prometheus.CounterVec   // group, reason
	HandleLatency  *prometheus.HistogramVec // group, topic
	InFlight       *prometheus.GaugeVec     // group, topic
	ParkedKeys     *prometheus.GaugeVec     // group, topic
	WindowMessages *prometheus.GaugeVec     // group, topic
	// Scheduled messages fetched and waiting for their time (docs/scheduling.md).
	ScheduledMessages *prometheus.GaugeVec // group, topic
	// The delivery memory budget (delivery.memory_bytes), per group's share.
	DeliveryMemory       *prometheus.GaugeVec   // group
	DeliveryMemoryLimit  *prometheus.GaugeVec   // group
	DeliveryMemoryPaused *prometheus.CounterVec // group
	// Reads made off the loop (delivery.reads_in_flight).
	DeliveryReadsInFlight *prometheus.GaugeVec // group
	LagMessages           *prometheus.GaugeVec // group, topic, partition
	LagSeconds            *prometheus.GaugeVec // group, topic, partition
	Consumers             *prometheus.GaugeVec // group
	MemberDegraded        *prometheus.GaugeVec // group, topic
	// Consumer groups across a cluster's sidecars (docs/groups.md).
	GroupGeneration      *prometheus.GaugeVec   // group
	GroupMembers         *prometheus.GaugeVec   // group, topic
	GroupPartitionsOwned *prometheus.GaugeVec   // group, topic
	GroupPartitionMoves  *prometheus.CounterVec // group, topic, direction
	GroupSelfFences      *prometheus.CounterVec // group, topic
	GroupFencedAcks      *prometheus.CounterVec // group, topic
	GroupFencedDrops     *prometheus.CounterVec // group, topic
	ExpiredUnread        *prometheus.CounterVec // group, topic
	CommitErrors         *prometheus.CounterVec // group, topic
	FaultsInjected       *prometheus.CounterVec // group, topic, kind

	DedupeHits          *prometheus.CounterVec   // group, topic
	UndedupedDeliveries *prometheus.CounterVec   // group, topic
	UncountedFailures   *prometheus.CounterVec   // group, topic
	LedgerDropped       *prometheus.CounterVec   // group, topic
	LedgerLatency       *prometheus.HistogramVec // op
	LedgerBatch         *prometheus.HistogramVec // op
	LedgerErrors        *prometheus.CounterVec   // op
	LedgerAvailable     prometheus.Gauge
	LedgerMalformed     *prometheus.CounterVec // op
	RemoteRefused       *prometheus.CounterVec // peer (redis, nats, kafka)
	NodePartitions      *prometheus.GaugeVec   // (none)
	PlaintextRemotes    *prometheus.GaugeVec   // peer
	NodePartitionsLimit *prometheus.GaugeVec   // (none)
	OpenFiles           prometheus.Gauge
	OpenFilesLimit      prometheus.Gauge
	BreakerState        *prometheus.GaugeVec   // group, topic, downstream
	BreakerTransitions  *prometheus.CounterVec // group, topic, downstream, to
	Redriven            *prometheus.CounterVec // group, topic
	RedriveSkipped      *prometheus.CounterVec // group, topic, reason

	PartitionQuarantined *prometheus.GaugeVec // topic, partition

	// The Kafka backend (docs/backends.md).
	KafkaPositionsTruncated *prometheus.CounterVec // group, topic

	// A cluster node's replication (docs/replication.md); absent on a single node.
	ClusterNodes  *prometheus.GaugeVec // (none)
	ClusterPeerUp *prometheus.GaugeVec // peer
	// ClusterVersion and ClusterVersionAvailable: the cluster version, and
	// the highest every node speaks (above it: a finalization pending).
	ClusterVersion, ClusterVersionAvailable *prometheus.GaugeVec
	ClusterNodeVersion                      *prometheus.GaugeVec   // node, bound (min, max)
	ClusterNodesDown                        *prometheus.GaugeVec   // (none)
	PartitionsMoving                        *prometheus.GaugeVec   // (none)
	UnderReplicated                         *prometheus.GaugeVec   // (none)
	PartitionLeader                         *prometheus.GaugeVec   // topic, partition
	ReplicaLogRecords                       *prometheus.GaugeVec   // topic, partition
	ReplicaStopped                          *prometheus.GaugeVec   // topic, partition
	ReplicasStopped                         *prometheus.GaugeVec   // reason
	ReplicasReopened                        *prometheus.CounterVec // (none)
	RaftProposals                           *prometheus.CounterVec // outcome
	RaftMessages                            *prometheus.CounterVec // direction
	RaftMessagesDropped                     *prometheus.CounterVec // reason
	MoveCopiesDelayed                       *prometheus.CounterVec // (none)
	MoveCopyWaiting                         *prometheus.GaugeVec   // (none)
	CommandsSkipped                         *prometheus.CounterVec // machine
	PeerRefusals                            *prometheus.CounterVec // reason
	ConfChangesSkipped                      *prometheus.CounterVec // (none)
	ProducersEvicted                        *prometheus.CounterVec // (none)
	GroupsQuiesced                          *prometheus.GaugeVec   // (none)
	PeersDeclaredDead                       *prometheus.CounterVec // (none)
	// Cluster holds the cluster metrics above and brings them up to date
	// when they are scraped (Refresh), not on a timer: an idle node that
	// nobody scrapes spends nothing on its replicas' series.
	Cluster *OnScrape

	// Admin calls refused (docs/security.md, "Admin").
	AdminRefused *prometheus.CounterVec // reason
	AdminTokens  prometheus.Gauge

	// BuildInfo is 1, labelled with this binary's release (internal/buildinfo).
	BuildInfo *prometheus.GaugeVec // version, commit, go_version
}

// latencyBuckets span 100 µs to ~100 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 16)

// New creates the collectors and registers them, plus the Go and process
// collectors, on a new registry.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spool", Name: name, Help: help}, labels)
		r.MustRegister(c)
		return c
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "spool", Name: name, Help: help}, labels)
		r.MustRegister(g)
		return g
	}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "spool", Name: name, Help: help, Buckets: latencyBuckets}, labels)
		r.MustRegister(h)
		return h
	}
	m := &Metrics{
		Registry:              r,
		PublishMessages:       counter("publish_messages_total", "Messages appended durably by Publish and PublishStream.", "topic"),
		PublishBytes:          counter("publish_bytes_total", "Payload, key and header bytes appended durably.", "topic"),
		PublishMemory:         prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "spool", Name: "publish_memory_bytes", Help: "Bytes of publish requests in flight (received, not yet answered); bounded by publish.memory_bytes."}),
		LogSyncs:              newLogSyncs(),
		AppDenied:             counter("app_denied_total", "Calls and publish requests refused to an app, by identity (__other for one not configured) and reason: UNAUTHENTICATED, PUBLISH_NOT_ALLOWED, SUBSCRIBE_NOT_ALLOWED, RATE_LIMITED.", "app", "reason"),
		AppRateTokens:         gauge("app_rate_tokens", "Tokens left in an identity's publish bucket (kind messages or bytes) after its last publish; negative while a batch larger than the burst is paid back.", "app", "kind"),
		MemoryLimit:           prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "spool", Name: "memory_limit_bytes", Help: "The Go runtime's soft memory limit (node.memory_limit, or GOMEMLIMIT when set); 0: none."}),
		PublishMemoryLimit:    prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "spool", Name: "publish_memory_limit_bytes", Help: "publish.memory_bytes: what publish requests in flight may hold."}),
		PublishMemoryWaits:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spool", Name: "publish_memory_waits_total", Help: "Publish requests that waited for room in publish.memory_bytes (their stream read nothing more meanwhile)."}),
		PublishMemoryRefused:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spool", Name: "publish_memory_refused_total", Help: "Publish requests that ended (deadline, cancellation) before publish.memory_bytes had room for them: nothing of them was stored."}),
		AdminRefused:          counter("admin_refused_total", "Admin calls (AdminService, pprof, /metrics on the admin listener) refused, by reason: no_credentials, unknown_token, unknown_certificate (Unauthenticated), role_too_low (PermissionDenied), unknown_method.", "reason"),
		AdminTokens:           prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "spool", Name: "admin_tokens", Help: "Tokens loaded from admin.tokens_file (at most 10000)."}),
		PublishRejected:       counter("publish_rejected_total", "Published messages refused, by the reason the producer got (docs/errors.md); topic is __other for topics the node does not have.", "topic", "reason"),
		PublishLatency:        hist("publish_latency_seconds", "Time from receiving a publish to its messages being durable.", "topic"),
		SubscribeRefused:      counter("subscribe_refused_total", "Subscribe streams refused at Start before anything was logged, by reason: consumer_name_too_long (start.consumer_name over 256 bytes, deliver.MaxConsumerNameBytes).", "reason"),
		Deliveries:            counter("deliveries_total", "Deliveries handed to the application (first attempts and redeliveries).", "group", "topic"),
		Settlements:           counter("settlements_total", "Deliveries settled, by outcome: ack, retry, dead_letter, release (the app's acks and nacks), stream_closed (released because the app's stream ended). Lease expiries: spool_lease_expiries_total.", "group", "topic", "outcome"),
		Redeliveries:          counter("redeliveries_total", "Deliveries with attempt > 1.", "group", "topic"),
		LeaseExpiries:         counter("lease_expiries_total", "Leases (visibility timeouts) that ended without a settlement.", "group", "topic"),
		DeadLettered:          counter("dead_lettered_total", "Messages moved to the dead-letter topic, by reason.", "group", "topic", "reason"),
		SettleErrors:          counter("settle_errors_total", "Settlements that changed nothing (stale fencing token, unknown delivery).", "group", "reason"),
		HandleLatency:         hist("handle_latency_seconds", "Time from delivery to settlement (ack or nack) by the application.", "group", "topic"),
		InFlight:              gauge("in_flight", "Deliveries outstanding at the application.", "group", "topic"),
		ParkedKeys:            gauge("parked_keys", "Keys whose next message waits for a retry of an earlier one (ordering=key).", "group", "topic"),
		WindowMessages:        gauge("window_messages", "Messages fetched and not yet finished (bounded by window_messages).", "group", "topic"),
		ScheduledMessages:     gauge("scheduled_messages", "Scheduled messages fetched and waiting for their delivery time; they count in window_messages and hold the committed offset.", "group", "topic"),
		DeliveryMemory:        gauge("delivery_memory_bytes", "Bytes the group holds for delivery: fetched-but-unfinished records (at the app too), the windows' rings, dead letters being published; bounded by its share of delivery.memory_bytes.", "group"),
		DeliveryMemoryLimit:   gauge("delivery_memory_limit_bytes", "The group's share of delivery.memory_bytes.", "group"),
		DeliveryMemoryPaused:  counter("delivery_memory_paused_seconds_total", "Time some partition of the group waited to fetch because the group's memory budget was full.", "group"),
		DeliveryReadsInFlight: gauge("delivery_reads_in_flight", "Reads of the group's partitions under way on its readers (a broker backend or a cluster; bounded by delivery.reads_in_flight, one per partition).", "group"),
		LagMessages:           gauge("lag_messages", "Messages appended and not yet finished by the group: log end minus committed offset, less those finished out of order.", "group", "topic", "partition"),
		LagSeconds:            gauge("lag_seconds", "Age of the oldest unfinished message of the group, in seconds (0 when caught up).", "group", "topic", "partition"),
		Consumers:             gauge("consumers", "Application streams (or callback dispatchers) connected per group.", "group"),
		GroupGeneration:       gauge("group_generation", "In a cluster: the generation of the group's assignment this sidecar last applied (it grows with every rebalance).", "group"),
		GroupMembers:          gauge("group_members", "In a cluster: the group's members taking the topic (sidecars whose app consumes it), as the coordinator holds them.", "group", "topic"),
		GroupPartitionsOwned:  gauge("group_partitions_owned", "In a cluster: the topic's partitions this sidecar's member owns (being revoked included). Summed over the sidecars it is the partition count once the group is settled.", "group", "topic"),
		GroupPartitionMoves:   counter("group_partition_moves_total", "In a cluster: partitions this sidecar started delivering (direction in) or gave up (out: handed over after a revocation, or stopped at once when fenced).", "group", "topic", "direction"),
		GroupSelfFences:       counter("group_self_fences_total", "In a cluster: times this sidecar's member stopped its partitions on its own because the group's coordinator took no heartbeat of it for its session timeout (before the coordinator could expire it).", "group", "topic"),
		GroupFencedAcks:       counter("group_fenced_acks_total", "In a cluster with the ledger: acks of deliveries whose partition had stopped because the member was fenced, written to the ledger under their fencing token (the new owner then finds them done unless it took them over first).", "group", "topic"),
		GroupFencedDrops:      counter("group_fenced_drops_total", "In a cluster: deliveries queued for an app's stream (or the callback dispatcher) that were dropped instead of sent because their member had fenced itself by then (a pause past the session timeout); they never reach the app.", "group", "topic"),
		MemberDegraded:        gauge("group_member_degraded", "In a cluster: 1 while this sidecar's member of the group for the topic says it is degraded (its breakers have held deliveries past cluster.group_degrade_after), so the coordinator gives its partitions to healthy members.", "group", "topic"),
		ExpiredUnread:         counter("expired_unread_total", "Messages deleted by retention before the group finished them (lag exceeded retention).", "group", "topic"),
		CommitErrors:          counter("commit_errors_total", "Failed writes of committed offsets (retried at the next commit).", "group", "topic"),
		FaultsInjected:        counter("faults_injected_total", "Faults injected into deliveries by a subscription's faults setting (tests only; docs/semantics.md, \"Testing a handler\"): kind duplicate, lose_ack, delay or early_lease_expiry.", "group", "topic", "kind"),

		DedupeHits:          counter("dedupe_hits_total", "Deliveries the ledger found already done (or dead-lettered) for the group: acked without reaching the app.", "group", "topic"),
		UndedupedDeliveries: counter("undeduped_deliveries_total", "Deliveries made without a ledger check because the ledger was unavailable (redis_unavailable: deliver).", "group", "topic"),
		UncountedFailures:   counter("uncounted_failures_total", "Failed attempts not counted because the named downstream's breaker was open.", "group", "topic"),
		LedgerDropped:       counter("ledger_dropped_total", "Ledger writes dropped because the backlog limit was reached while the ledger was unavailable (may cause redeliveries).", "group", "topic"),
		LedgerLatency:       hist("ledger_latency_seconds", "Time of one ledger call (one batch), by operation.", "op"),
		LedgerBatch: func() *prometheus.HistogramVec {
			h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "spool", Name: "ledger_batch_messages",
				Help:    "Messages in one ledger call, by operation (completions are gathered for up to delivery.ledger_write_delay).",
				Buckets: prometheus.ExponentialBuckets(1, 2, 11)}, []string{"op"})
			r.MustRegister(h)
			return h
		}(),
		LedgerErrors:        counter("ledger_errors_total", "Failed ledger calls, by operation (including calls refused by the open breaker toward Redis).", "op"),
		LedgerAvailable:     prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "spool", Name: "ledger_available", Help: "1 once Redis has answered; 0 after a failed startup ping or while the breaker toward Redis is open, until Redis answers again."}),
		LedgerMalformed:     counter("ledger_malformed_entries_total", "Entries under the ledger's key prefix not in the ledger's format (or of another Redis type), by the operation that met them: claim overwrote it with a first attempt; complete, release, dead left it alone; reset answered absent. Each affects only its own message.", "op"),
		RemoteRefused:       counter("remote_replies_refused_total", "Connections to the ledger's Redis (peer=redis), a NATS server (peer=nats) or a Kafka broker (peer=kafka) closed because a reply declared or sent more than guards.redis_max_reply_bytes, guards.nats_max_frame_bytes or guards.kafka_max_reply_bytes, or was not the protocol; only the call that met it fails.", "peer"),
		PlaintextRemotes:    gauge("plaintext_remotes", "Addresses of the ledger's Redis (peer=redis) or the broker (nats, kafka) that spoold reaches without TLS beyond loopback (only with guards.insecure_plaintext_remotes or node.dev: refused at start otherwise; each logged as INSECURE).", "peer"),
		NodePartitions:      gauge("node_partitions", "Partitions of all topics of a single node (embedded storage without a cluster), against guards.max_node_partitions."),
		NodePartitionsLimit: gauge("node_partitions_limit", "guards.max_node_partitions: past it a new topic is refused (INVALID_TOPIC_SPEC)."),
		OpenFiles:           gauge("open_files", "Files the node keeps open in its data dir: three per segment of each partition, in a cluster one raft state file per replica, and the lock.").WithLabelValues(),
		OpenFilesLimit:      gauge("open_files_limit", "guards.max_open_files: a topic whose new partitions would take spool_open_files past it is refused on a single node (INVALID_TOPIC_SPEC).").WithLabelValues(),
		BreakerState:        gauge("breaker_state", "Circuit breaker state per downstream: 0 closed, 1 half-open, 2 open.", "group", "topic", "downstream"),
		BreakerTransitions:  counter("breaker_transitions_total", "Circuit breaker transitions, by the state entered.", "group", "topic", "downstream", "to"),
		Redriven:            counter("redriven_total", "Dead-lettered messages redriven back to the group that dead-lettered them.", "group", "topic"),
		RedriveSkipped:      counter("redrive_skipped_total", "Dead letters matched by a redrive but not redriven, by reason (already_done: the ledger shows the message was handled).", "group", "topic", "reason"),

		KafkaPositionsTruncated: counter("kafka_positions_truncated_total", "Finished offsets left out of a Kafka offset commit because they did not fit in its metadata (storage.backend kafka): they are delivered again after a restart. Growing: many finished offsets above a stuck one; look for a hung handler or a parked key.", "group", "topic"),
		PartitionQuarantined:    gauge("partition_quarantined", "1 for a partition quarantined because its data is damaged: it serves only the records before the damage and refuses publishes until repaired (docs/operations.md).", "topic", "partition"),
	}
	m.Cluster = &OnScrape{}
	m.clusterMetrics(m.Cluster.counter, m.Cluster.gauge)
	r.MustRegister(m.Cluster)
	m.BuildInfo = gauge("build_info", "1, labelled with this spoold's release: version (the VERSION file), commit and the Go version that built it (spoold version).", "version", "commit", "go_version")
	m.BuildInfo.WithLabelValues(buildinfo.Version, buildinfo.Commit(), buildinfo.GoVersion()).Set(1)
	r.MustRegister(m.LedgerAvailable)
	r.MustRegister(m.PublishMemory, m.PublishMemoryLimit, m.PublishMemoryWaits, m.PublishMemoryRefused, m.MemoryLimit, m.LogSyncs, m.AdminTokens)
	return m
}

type (
	newCounter func(name, help string, labels ...string) *prometheus.CounterVec
	newGauge   func(name, help string, labels ...string) *prometheus.GaugeVec
)

// clusterMetrics makes the metrics of a cluster member and of its replicas
// (with the constructors New registers them through).
func (m *Metrics) clusterMetrics(counter newCounter, gauge newGauge) {
	m.ClusterNodes = gauge("cluster_nodes", "Members of the cluster known to this node (its controller state).")
	m.ClusterPeerUp = gauge("cluster_peer_up", "1 while this node's raft streams to the peer are connected, else 0.", "peer")
	m.ClusterVersion = gauge("cluster_version", "The cluster version: the behaviour every node follows (1 until the first finalization; docs/upgrading.md).")
	m.ClusterVersionAvailable = gauge("cluster_version_available", "The highest cluster version every node speaks now; above spool_cluster_version, a finalization is pending (cluster.finalize).")
	m.ClusterNodeVersion = gauge("cluster_node_version", "The cluster versions each node's release speaks, as it last said (bound: min, max; 1 and 1 for a 0.1.0 node).", "node", "bound")
	m.ClusterNodesDown = gauge("cluster_nodes_down", "Members the cluster marks down: unreachable past cluster.dead_node_timeout (their replicas move to other nodes).")
	m.PartitionsMoving = gauge("cluster_partitions_moving", "Partitions of the cluster with a replica move under way (at most 8 start at once).")
	m.UnderReplicated = gauge("cluster_partitions_under_replicated", "Partitions of the cluster with a replica on a node marked down and no move under way that replaces it (no node to put it on).")
	m.PartitionLeader = gauge("partition_leader", "For each partition this node holds a replica of: 1 if it leads the partition's raft group, else 0. Every partition should have exactly one 1 across the cluster.", "topic", "partition")
	m.ReplicaLogRecords = gauge("replica_log_records", "For each partition this node holds a replica of: the committed records its log holds (committed end minus log start). Retention bounds it for topics; for the consumer groups' topic __groups, checkpoints do (about cluster groups checkpoint records per partition).", "topic", "partition")
	m.ReplicaStopped = gauge("replica_stopped", "1 for a replica stopped by a storage error: it neither votes nor leads, and this node reads the partition from its other replicas (docs/operations.md, \"A full disk\").", "topic", "partition")
	m.ReplicasStopped = gauge("replicas_stopped", "This node's replicas stopped now (the controller's included), by reason: disk_full (opened again every cluster reopen interval, catches up by itself once space returns), damaged (until repaired), other (until the node restarts).", "reason")
	m.ReplicasReopened = counter("replicas_reopened_total", "Replicas stopped by a full disk that this node opened again from disk (every 2 s while the disk stays full; once space returns the replica runs and catches up).")
	m.RaftProposals = counter("raft_proposals_total", "Raft proposals made on this node, by outcome: ok (committed), lost (not stored: retried), unknown (may be stored), not_leader, refused.", "outcome")
	m.RaftMessages = counter("raft_messages_total", "Raft messages exchanged with peers, by direction: sent, received.", "direction")
	m.RaftMessagesDropped = counter("raft_messages_dropped_total", "Raft messages not sent or not taken, by reason: queue_full, too_large, no_peer, unsent, inbox_full, malformed (raft sends again).", "reason")
	m.MoveCopiesDelayed = counter("move_copies_delayed_total", "Appends to the new replicas of moving partitions that waited for cluster.move_bytes_per_second.")
	m.ProducersEvicted = counter("cluster_producers_evicted_total", "Producers (forwarding nodes' partition forwarders) forgotten by this node's partition producer tables, the least recently used first, beyond 4096 per partition: a resent batch of one is no longer recognised as a copy.")
	m.MoveCopyWaiting = gauge("move_copy_waiting_bytes", "Bytes of entries waiting for cluster.move_bytes_per_second before going to new replicas.")
	m.CommandsSkipped = counter("cluster_commands_skipped_total", "Records of a replicated state machine's log that this node skipped because they do not decode or validate, by machine: controller (raft group 0), coordinator (the consumer groups' topic __groups). Every node skips them alike; any rise means a hostile peer, damage or a newer release's command.", "machine")
	m.PeerRefusals = counter("cluster_peer_refusals_total", "What this node refused of a peer, by reason: handshake (a raft stream of another cluster or protocol), identity (a raft stream whose certificate is not the claimed node's, or claims no member's node id), produce (a forwarded write to the controller or an internal topic that is no valid command or not a member's), join (without the join secret, or with another identity's token). Each is also logged.", "reason")
	m.ConfChangesSkipped = counter("raft_conf_changes_skipped_total", "Committed raft configuration changes skipped because raft refuses to apply them (every replica skips them alike): a hostile or broken leader.")
	m.GroupsQuiesced = gauge("raft_groups_quiesced", "This node's raft groups quiesced now: idle, they take no tick and send no heartbeat until something happens to them (cluster.quiesce).")
	m.PeersDeclaredDead = counter("cluster_peers_declared_dead_total", "Times node-level liveness declared a peer's node dead: nothing heard from it for 2 s (its quiet groups wake; the followers of its groups elect).")
}

// OnScrape is a collector of metrics brought up to date when they are
// scraped: Collect runs the refresh set by Refresh (one at a time), then
// collects the metrics made through it.
type OnScrape struct {
	mu      sync.Mutex
	refresh func()
	cs      []prometheus.Collector
}

func (o *OnScrape) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spool", Name: name, Help: help}, labels)
	o.cs = append(o.cs, c)
	return c
}

func (o *OnScrape) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "spool", Name: name, Help: help}, labels)
	o.cs = append(o.cs, g)
	return g
}

// Refresh sets what brings the metrics up to date before a scrape reads them.
func (o *OnScrape) Refresh(refresh func()) {
	o.mu.Lock()
	o.refresh = refresh
	o.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (o *OnScrape) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.cs {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (o *OnScrape) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refresh != nil {
		o.refresh()
	}
	for _, c := range o.cs {
		c.Collect(ch)
	}
}

// LogSyncs exports the embedded log's sync counts as
// spool_log_syncs_total{kind}: files (fdatasyncs of segment files),
// filesystem (syncs of the whole file system, storage.sync filesystem),
// fallback (file-system syncs that failed and were redone file by file)
// and journal (fdatasyncs of the node journal, storage.sync journal); and
// the journal's spool_log_journal_bytes_total,
// spool_log_journal_checkpoints_total and spool_log_journal_lag_bytes.
// It reports nothing until Read is set (a broker backend never sets it).
type LogSyncs struct {
	desc, jBytes, jCheckpoints, jLag *prometheus.Desc
	mu                               sync.Mutex
	read                             func() LogSyncCounts
}

// LogSyncCounts are what LogSyncs exports.
type LogSyncCounts struct {
	Files, FileSystem, Fallbacks, Journal, JournalBytes, Checkpoints uint64
	JournalLag                                                       int64
}

func newLogSyncs() *LogSyncs {
	return &LogSyncs{
		desc: prometheus.NewDesc("spool_log_syncs_total",
			"Syncs made by the log's fsync: always rounds, by kind: files (one fdatasync per segment file; with storage.sync journal, at checkpoints), filesystem (one syncfs for several files, storage.sync filesystem), fallback (a syncfs that failed and was redone file by file), journal (one fdatasync of the node journal per round, storage.sync journal).",
			[]string{"kind"}, nil),
		jBytes: prometheus.NewDesc("spool_log_journal_bytes_total",
			"Bytes appended to the node journal (storage.sync journal): every message's frames a second time.", nil, nil),
		jCheckpoints: prometheus.NewDesc("spool_log_journal_checkpoints_total",
			"Journal checkpoints: the segments written behind the journal synced, and the journal cut (storage.sync journal).", nil, nil),
		jLag: prometheus.NewDesc("spool_log_journal_lag_bytes",
			"The node journal's size: bytes whose segments are not synced yet, replayed after a power loss (at most about storage.journal_bytes).", nil, nil),
	}
}

// Read sets where the counts come from.
func (l *LogSyncs) Read(read func() LogSyncCounts) {
	l.mu.Lock()
	l.read = read
	l.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (l *LogSyncs) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.desc
	ch <- l.jBytes
	ch <- l.jCheckpoints
	ch <- l.jLag
}

// Collect implements prometheus.Collector.
func (l *LogSyncs) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	read := l.read
	l.mu.Unlock()
	if read == nil {
		return
	}
	c := read()
	ch <- prometheus.MustNewConstMetric(l.desc, prometheus.CounterValue, float64(c.Files), "files")
	ch <- prometheus.MustNewConstMetric(l.desc, prometheus.CounterValue, float64(c.FileSystem), "filesystem")
	ch <- prometheus.MustNewConstMetric(l.desc, prometheus.CounterValue, float64(c.Fallbacks), "fallback")
	ch <- prometheus.MustNewConstMetric(l.desc, prometheus.CounterValue, float64(c.Journal), "journal")
	ch <- prometheus.MustNewConstMetric(l.jBytes, prometheus.CounterValue, float64(c.JournalBytes))
	ch <- prometheus.MustNewConstMetric(l.jCheckpoints, prometheus.CounterValue, float64(c.Checkpoints))
	ch <- prometheus.MustNewConstMetric(l.jLag, prometheus.GaugeValue, float64(c.JournalLag))
}
