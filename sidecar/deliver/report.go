package deliver

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolmq/spool/sidecar/metrics"
)

// The driver's side of the machine's observations (observe.go): after each
// round it adds the machine's counts to the Prometheus metrics of
// docs/metrics.md, sets its gauges and writes its log lines.

// subMetrics are one subscription's metric children, resolved once (no
// label lookups on the hot path).
type subMetrics struct {
	stats                    [numStats]prometheus.Counter
	handleLatency            prometheus.Observer
	inFlight, parked, window prometheus.Gauge
	scheduled                prometheus.Gauge
	ledgerDropped            prometheus.Counter
	lagMsgs, lagSecs         []prometheus.Gauge // by partition
}

func newSubMetrics(mt *metrics.Metrics, group, topic string, parts int) *subMetrics {
	sm := &subMetrics{
		handleLatency: mt.HandleLatency.WithLabelValues(group, topic),
		inFlight:      mt.InFlight.WithLabelValues(group, topic),
		parked:        mt.ParkedKeys.WithLabelValues(group, topic),
		window:        mt.WindowMessages.WithLabelValues(group, topic),
		scheduled:     mt.ScheduledMessages.WithLabelValues(group, topic),
		ledgerDropped: mt.LedgerDropped.WithLabelValues(group, topic),
	}
	sm.stats = [numStats]prometheus.Counter{
		statDeliveries:    mt.Deliveries.WithLabelValues(group, topic),
		statRedeliveries:  mt.Redeliveries.WithLabelValues(group, topic),
		statLeaseExpiries: mt.LeaseExpiries.WithLabelValues(group, topic),
		statAcks:          mt.Settlements.WithLabelValues(group, topic, "ack"),
		statRetries:       mt.Settlements.WithLabelValues(group, topic, "retry"),
		statDeadLetters:   mt.Settlements.WithLabelValues(group, topic, "dead_letter"),
		statReleases:      mt.Settlements.WithLabelValues(group, topic, "release"),
		statStreamClosed:  mt.Settlements.WithLabelValues(group, topic, "stream_closed"),
		statDedupeHits:    mt.DedupeHits.WithLabelValues(group, topic),
		statUndeduped:     mt.UndedupedDeliveries.WithLabelValues(group, topic),
		statUncounted:     mt.UncountedFailures.WithLabelValues(group, topic),
	}
	for p := range parts {
		pl := strconv.Itoa(p)
		sm.lagMsgs = append(sm.lagMsgs, mt.LagMessages.WithLabelValues(group, topic, pl))
		sm.lagSecs = append(sm.lagSecs, mt.LagSeconds.WithLabelValues(group, topic, pl))
	}
	return sm
}

// report publishes what the machine observed since the last call and
// clears it (on the loop).
func (g *Group) report() {
	mc := g.mc
	for _, s := range mc.subs {
		for i, v := range s.stats {
			if v != 0 {
				s.metrics.stats[i].Add(v)
			}
		}
		s.stats = [numStats]float64{}
		for _, v := range s.latencies {
			s.metrics.handleLatency.Observe(v)
		}
		clear(s.latencies)
		s.latencies = s.latencies[:0]
	}
	for k, v := range mc.obs.counts {
		g.counter(k).Add(v)
	}
	clear(mc.obs.counts)
	for k, v := range mc.obs.gauges {
		g.gaugeOf(k).Set(v)
	}
	clear(mc.obs.gauges)
	for _, n := range mc.obs.notes {
		g.log.Log(context.Background(), n.level, n.msg, n.args...)
	}
	clear(mc.obs.notes)
	mc.obs.notes = mc.obs.notes[:0]
}

// counter is the series of a counter the machine counted.
func (g *Group) counter(k metricKey) prometheus.Counter {
	mt, gr := g.met, g.cfg.Name
	switch k.id {
	case metSettleErrors:
		return mt.SettleErrors.WithLabelValues(gr, k.l1)
	case metExpiredUnread:
		return mt.ExpiredUnread.WithLabelValues(gr, k.l1)
	case metCommitErrors:
		return mt.CommitErrors.WithLabelValues(gr, k.l1)
	case metDeadLettered:
		return mt.DeadLettered.WithLabelValues(gr, k.l1, k.l2)
	case metBreakerTransitions:
		return mt.BreakerTransitions.WithLabelValues(gr, k.l1, k.l2, k.l3)
	case metPartitionMoves:
		return mt.GroupPartitionMoves.WithLabelValues(gr, k.l1, k.l2)
	case metSelfFences:
		return mt.GroupSelfFences.WithLabelValues(gr, k.l1)
	case metFencedAcks:
		return mt.GroupFencedAcks.WithLabelValues(gr, k.l1)
	case metFencedDrops:
		return mt.GroupFencedDrops.WithLabelValues(gr, k.l1)
	case metMemoryPaused:
		return mt.DeliveryMemoryPaused.WithLabelValues(gr)
	case metFaultsInjected:
		return mt.FaultsInjected.WithLabelValues(gr, k.l1, k.l2)
	}
	panic("deliver: not a counter: " + strconv.Itoa(int(k.id)))
}

// gaugeOf is the series of a gauge the machine set.
func (g *Group) gaugeOf(k metricKey) prometheus.Gauge {
	mt, gr := g.met, g.cfg.Name
	switch k.id {
	case metConsumers:
		return mt.Consumers.WithLabelValues(gr)
	case metGeneration:
		return mt.GroupGeneration.WithLabelValues(gr)
	case metMembers:
		return mt.GroupMembers.WithLabelValues(gr, k.l1)
	case metPartitionsOwned:
		return mt.GroupPartitionsOwned.WithLabelValues(gr, k.l1)
	case metMemberDegraded:
		return mt.MemberDegraded.WithLabelValues(gr, k.l1)
	case metBreakerState:
		return mt.BreakerState.WithLabelValues(gr, k.l1, k.l2)
	case metMemory:
		return mt.DeliveryMemory.WithLabelValues(gr)
	}
	panic("deliver: not a gauge: " + strconv.Itoa(int(k.id)))
}
