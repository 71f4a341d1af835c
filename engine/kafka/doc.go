// Package kafka is a storage backend (engine.Backend) that keeps a
// sidecar's messages in Apache Kafka (or a Kafka-compatible broker)
// instead of the embedded log (docs/backends.md).
//
// # Mapping
//
//   - A topic is the Kafka topic <prefix><topic>, with the same partitions:
//     Spool's partition is the Kafka partition and Spool's offset the Kafka
//     offset, exactly. Topics are checked at Open and EnsureTopic, and
//     created (with the topic's retention, and message.timestamp.type
//     LogAppendTime) only when Config.CreateTopics allows it.
//   - A record is one Kafka record: Spool's key is the record key (none
//     when empty), the value its value, the headers its headers in order,
//     and the message id the first header, spool-id (record.go). A record
//     that another Kafka producer wrote has no spool-id header: its id is
//     kafka:<partition>:<offset>. The record's time is its Kafka timestamp
//     (the broker's append time on topics Spool creates).
//   - Produce is a produce with acks=all and the idempotent producer to
//     the partition Spool's partitioner chose (engine.PartitionForKey, so
//     a key's order holds), completing when Kafka has acked every record.
//     The client's own retries of a produce are stored once (producer id
//     and sequence); a publish that the app retries after an unknown
//     outcome may be stored twice, and the consumer's ledger drops the copy.
//   - Fetch is one fetch request to the partition's leader (no consumer
//     group): records from an offset up to the high watermark.
//   - Offsets are the log start offset and the high watermark (what a
//     read_uncommitted reader sees; Fetch reads up to it, and Spool writes
//     no transactions, so it is also the last stable offset). The engine's
//     Offsets asks for one partition, and its callers loop over
//     partitions, so the batching is per topic and by time, not by API: a
//     call joins the topic's listing that has not been sent yet, or opens
//     one, which lists start and end of every partition of the topic with
//     kadm (ListStartOffsets and ListEndOffsets, sent together: one
//     ListOffsets request each per leader broker). One listing per topic
//     is in flight at a time; calls that arrive meanwhile share the next
//     (offsets.go, offsetsBatch). No call is answered from a listing sent
//     before it began, so a produce acked before the call, or records
//     deleted before it, are seen; a cache with an age was rejected for
//     that (a reset to the end would miss a message just published through
//     another sidecar). A call alone pays one round trip, as before, with
//     start and end asked in parallel instead of one after the other.
//     OffsetForTime is kadm's ListOffsetsAfterMilli (the end when no record
//     is that recent).
//   - Watch polls the end offsets of watched topics (Config.WatchInterval)
//     and signals when one moved; a publish through this backend signals
//     at once.
//   - Positions (LoadPositions, CommitPositions) are committed offsets of
//     the Kafka consumer group <prefix><group>: the committed offset is
//     Spool's next offset, and the finished offsets above it travel in the
//     commit's metadata (positions.go), bounded by Config.MetadataMaxBytes.
//     Kafka's own tools (kafka-consumer-groups --describe) show the lag.
//   - Consumer groups shared across sidecars (groups.go; the sidecar's
//     storage.kafka.shared_groups) are Kafka consumer groups: each member
//     (a sidecar's subscription) is a member of the Kafka group
//     <prefix><group> with the cooperative-sticky balancer, through a
//     franz-go group client that never fetches. Kafka assigns the
//     partitions and keeps the sessions; Coordinate and DescribeGroup
//     translate that into the coordinator's commands and view that the
//     sidecar's delivery driver speaks. A revoked partition is held, in
//     OnPartitionsRevoked, until the sidecar has handed it over
//     (RevokeDone: in-flight deliveries finished or handed back, position
//     committed) or the revoke timeout passes; commits carry the member's
//     Kafka member id and generation. Without shared groups, each sidecar
//     delivers every partition of its groups and commits without a
//     generation.
//
// It imports engine (types, sentinels), never the sidecar.
package kafka
