package deliver

import "log/slog"

// Observations: what the machine counts, measures and has to say, kept as
// data in its own state. They are not decisions and they are not side
// effects: after each round the driver publishes them (report.go: the
// Prometheus metrics of docs/metrics.md, the group's logger) and clears
// them. A test of the machine alone may read them or ignore them.

// stat is one of a subscription's counters (sub.stats).
type stat uint8

const (
	statDeliveries    stat = iota // spool_deliveries_total
	statRedeliveries              // spool_redeliveries_total
	statLeaseExpiries             // spool_lease_expiries_total
	statAcks                      // spool_settlements_total{outcome="ack"}
	statRetries                   // … "retry"
	statDeadLetters               // … "dead_letter"
	statReleases                  // … "release"
	statStreamClosed              // … "stream_closed"
	statDedupeHits                // spool_dedupe_hits_total
	statUndeduped                 // spool_undeduped_deliveries_total
	statUncounted                 // spool_uncounted_failures_total
	numStats
)

// metricID names a labelled metric of the group the machine counts or sets.
type metricID uint8

const (
	// Counters (added to).
	metSettleErrors       metricID = iota // l1: reason
	metExpiredUnread                      // l1: topic
	metCommitErrors                       // l1: topic
	metDeadLettered                       // l1: topic, l2: reason
	metBreakerTransitions                 // l1: topic, l2: downstream, l3: state entered
	metPartitionMoves                     // l1: topic, l2: direction
	metSelfFences                         // l1: topic
	metFencedAcks                         // l1: topic
	metFencedDrops                        // l1: topic
	metMemoryPaused                       // seconds
	metFaultsInjected                     // l1: topic, l2: kind
	// Gauges (the last value set).
	metConsumers
	metGeneration
	metMembers         // l1: topic
	metPartitionsOwned // l1: topic
	metMemberDegraded  // l1: topic
	metBreakerState    // l1: topic, l2: downstream
	metMemory
)

// metricKey is one series of a metric: its labels after the group's.
type metricKey struct {
	id         metricID
	l1, l2, l3 string
}

// note is a log line the machine has to say.
type note struct {
	level slog.Level
	msg   string
	args  []any
}

// observations is what the machine observed since the driver last
// published (sub.stats and sub.latencies hold the per-subscription ones).
type observations struct {
	counts map[metricKey]float64 // to add
	gauges map[metricKey]float64 // to set
	notes  []note
}

// count adds v to a counter.
func (m *machine) count(k metricKey, v float64) {
	if m.obs.counts == nil {
		m.obs.counts = map[metricKey]float64{}
	}
	m.obs.counts[k] += v
}

// gauge sets a gauge.
func (m *machine) gauge(k metricKey, v float64) {
	if m.obs.gauges == nil {
		m.obs.gauges = map[metricKey]float64{}
	}
	m.obs.gauges[k] = v
}

// note records a log line (args as slog's: key, value, ...).
func (m *machine) note(level slog.Level, msg string, args ...any) {
	m.obs.notes = append(m.obs.notes, note{level: level, msg: msg, args: args})
}
