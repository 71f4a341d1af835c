package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

// maxMetricsBytes bounds a /metrics page spool reads. Parsed, a page takes
// about 15 times its size in memory (a 63 MiB page took 982 MB); a
// sidecar's page is well under 1 MiB even with thousands of partitions.
const maxMetricsBytes = 8 << 20

// errMetricsTooLarge is a page over maxMetricsBytes.
var errMetricsTooLarge = fmt.Errorf("the page is over %d MiB", maxMetricsBytes>>20)

// boundedReader fails once more than n bytes have been read.
type boundedReader struct {
	r io.Reader
	n int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n < 0 {
		return 0, errMetricsTooLarge
	}
	if int64(len(p)) > b.n+1 {
		p = p[:b.n+1]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n < 0 {
		return 0, errMetricsTooLarge
	}
	return n, err
}

// scrape is one reading of a sidecar's /metrics: the samples spool plan
// uses, summed over the series that match the topic (and group).
type scrape struct {
	at                       time.Time
	published, publishedB    float64 // spool_publish_messages_total, _bytes_total {topic}
	settled                  float64 // spool_settlements_total {group, topic, outcome=ack|dead_letter}
	handleSum, handleCount   float64 // spool_handle_latency_seconds {group, topic}
	lag                      float64 // sum of spool_lag_messages {group, topic}
	lagSecondsMax            float64 // max of spool_lag_seconds {group, topic}
	consumers                float64 // spool_consumers {group}
	partitions               map[string]bool
	groupSeen, topicSeenPubs bool
}

// readMetrics fetches and parses url.
func readMetrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, usageErr("--from-metrics %q: %v: give the URL of a sidecar's /metrics, like http://127.0.0.1:7071/metrics", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, &exitError{code: exitUnreachable, msg: fmt.Sprintf("plan: reading %s: %v: is spoold running, and is this its admin address?", url, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, failed("plan: reading %s: HTTP %s: give the URL of a sidecar's /metrics (admin address)", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(&boundedReader{r: resp.Body, n: maxMetricsBytes})
	if errors.Is(err, errMetricsTooLarge) {
		return nil, failed("plan: reading %s: %v: is this a sidecar's /metrics?", url, err)
	}
	if err != nil {
		return nil, failed("plan: %s is not Prometheus text: %v", url, err)
	}
	return mfs, nil
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// pick sums what spool plan needs from a scrape; group "" takes every
// group of the topic.
func pick(mfs map[string]*dto.MetricFamily, at time.Time, topic, group string) scrape {
	s := scrape{at: at, partitions: map[string]bool{}}
	each := func(name string, fn func(l map[string]string, m *dto.Metric)) {
		for _, m := range mfs[name].GetMetric() {
			fn(labelsOf(m), m)
		}
	}
	ours := func(l map[string]string) bool { return l["topic"] == topic && (group == "" || l["group"] == group) }
	each("spool_publish_messages_total", func(l map[string]string, m *dto.Metric) {
		if l["topic"] == topic {
			s.published += value(m)
			s.topicSeenPubs = true
		}
	})
	each("spool_publish_bytes_total", func(l map[string]string, m *dto.Metric) {
		if l["topic"] == topic {
			s.publishedB += value(m)
		}
	})
	each("spool_settlements_total", func(l map[string]string, m *dto.Metric) {
		if ours(l) && (l["outcome"] == "ack" || l["outcome"] == "dead_letter") {
			s.settled += value(m)
		}
	})
	each("spool_handle_latency_seconds", func(l map[string]string, m *dto.Metric) {
		if ours(l) {
			s.handleSum += m.GetHistogram().GetSampleSum()
			s.handleCount += float64(m.GetHistogram().GetSampleCount())
		}
	})
	each("spool_lag_messages", func(l map[string]string, m *dto.Metric) {
		if ours(l) {
			s.lag += value(m)
			s.partitions[l["partition"]] = true
			s.groupSeen = true
		}
	})
	each("spool_lag_seconds", func(l map[string]string, m *dto.Metric) {
		if ours(l) {
			s.lagSecondsMax = max(s.lagSecondsMax, value(m))
		}
	})
	each("spool_consumers", func(l map[string]string, m *dto.Metric) {
		if group == "" || l["group"] == group {
			s.consumers += value(m)
		}
	})
	return s
}

// metricsPlan is what --from-metrics measured and concluded.
type metricsPlan struct {
	URL                 string   `json:"url" yaml:"url"`
	Topic               string   `json:"topic" yaml:"topic"`
	Group               string   `json:"group" yaml:"group"`
	WindowS             float64  `json:"window_s" yaml:"window_s"`
	PublishedPerS       float64  `json:"published_msgs_per_s" yaml:"published_msgs_per_s"`
	ProcessedPerS       float64  `json:"processed_msgs_per_s" yaml:"processed_msgs_per_s"`
	LagGrowthPerS       float64  `json:"lag_growth_msgs_per_s" yaml:"lag_growth_msgs_per_s"`
	ArrivalPerS         float64  `json:"arrival_msgs_per_s" yaml:"arrival_msgs_per_s"`
	MessageBytes        int64    `json:"message_bytes" yaml:"message_bytes"`
	ProcessingMs        float64  `json:"processing_ms" yaml:"processing_ms"`
	Partitions          int      `json:"partitions" yaml:"partitions"`
	Consumers           int64    `json:"consumers" yaml:"consumers"`
	LagS                float64  `json:"lag_s" yaml:"lag_s"`
	LagAgeGrowthSPerS   float64  `json:"lag_age_growth_s_per_s" yaml:"lag_age_growth_s_per_s"`
	RetentionS          int64    `json:"retention_s" yaml:"retention_s"`
	PastRetentionInS    float64  `json:"past_retention_in_s" yaml:"past_retention_in_s"` // -1: not heading there
	EnoughPartitions    bool     `json:"enough_partitions" yaml:"enough_partitions"`
	EnoughConsumers     bool     `json:"enough_consumers" yaml:"enough_consumers"`
	HeadingPastRetained bool     `json:"lag_heading_past_retention" yaml:"lag_heading_past_retention"`
	Plan                planView `json:"plan" yaml:"plan"`
}

// planFromMetrics reads url twice, window apart, derives the peak inputs
// of the plan from the differences, and compares the plan with what the
// sidecar shows: partitions, consumers, lag against retention.
func (a *app) planFromMetrics(cmd *cobra.Command, url, topic, group string, window time.Duration, in planInput, sizeSet, procSet bool) error {
	if topic == "" {
		return usageErr("--from-metrics needs --topic: the topic to size")
	}
	if window <= 0 {
		return usageErr("--window %s: use a positive duration like 10s", window)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), window+2*a.timeout)
	defer cancel()
	first, err := readMetrics(ctx, url)
	if err != nil {
		return err
	}
	s1 := pick(first, a.clock(), topic, group)
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return failed("plan: interrupted")
	}
	second, err := readMetrics(ctx, url)
	if err != nil {
		return err
	}
	s2 := pick(second, a.clock(), topic, group)
	if !s2.topicSeenPubs && !s2.groupSeen {
		return failed("plan: %s has no metrics of topic %q (no publishes through this sidecar, no group consuming it): check the topic, or point --from-metrics at the sidecar of its producers or consumers", url, topic)
	}
	dt := s2.at.Sub(s1.at).Seconds()
	mp := metricsPlan{URL: url, Topic: topic, Group: group, WindowS: dt, RetentionS: int64(in.Retention / time.Second)}
	mp.PublishedPerS = (s2.published - s1.published) / dt
	mp.ProcessedPerS = (s2.settled - s1.settled) / dt
	mp.LagGrowthPerS = (s2.lag - s1.lag) / dt
	// What arrives in the topic is what the group processed plus what its
	// lag grew by: this counts every producer's messages, not only those
	// published through this sidecar.
	mp.ArrivalPerS = max(mp.PublishedPerS, mp.ProcessedPerS+mp.LagGrowthPerS)
	if !sizeSet {
		if n := s2.published - s1.published; n > 0 {
			in.MessageBytes = int64((s2.publishedB-s1.publishedB)/n + 0.5)
		} else {
			return failed("plan: nothing was published to %s through this sidecar during the %s window, so the message size is unknown: give --size, or a longer --window", topic, window)
		}
	}
	if !procSet {
		if n := s2.handleCount - s1.handleCount; n > 0 {
			in.Processing = time.Duration((s2.handleSum - s1.handleSum) / n * float64(time.Second))
		} else {
			return failed("plan: no message of %s was handled during the %s window, so the processing time is unknown: give --processing-time, or a longer --window", topic, window)
		}
	}
	in.RatePerS = int64(mp.ArrivalPerS + 0.999) // round up: a peak
	if in.RatePerS < 1 {
		return failed("plan: no message arrived in %s during the %s window (published %.1f/s, processed %.1f/s): measure at peak, or give a longer --window", topic, window, mp.PublishedPerS, mp.ProcessedPerS)
	}
	if err := in.validate(); err != nil {
		return err
	}
	r := sizePlan(in)
	mp.MessageBytes, mp.ProcessingMs = in.MessageBytes, float64(in.Processing)/float64(time.Millisecond)
	mp.Partitions, mp.Consumers = len(s2.partitions), int64(s2.consumers)
	mp.LagS = s2.lagSecondsMax
	mp.LagAgeGrowthSPerS = (s2.lagSecondsMax - s1.lagSecondsMax) / dt
	mp.EnoughPartitions = int64(mp.Partitions) >= r.PartitionsMin
	mp.EnoughConsumers = mp.Consumers >= r.Consumers
	mp.PastRetentionInS = -1
	if mp.LagAgeGrowthSPerS > 0 && mp.LagGrowthPerS > 0 {
		mp.PastRetentionInS = max(float64(mp.RetentionS)-mp.LagS, 0) / mp.LagAgeGrowthSPerS
		mp.HeadingPastRetained = true
	}
	mp.Plan = planView{Rate: in.RatePerS, MessageBytes: in.MessageBytes, RetentionS: int64(in.Retention / time.Second),
		Replication: in.Replication, ProcessingMs: mp.ProcessingMs, HandlersPerConsumer: in.HandlersPerConsumer, HeadroomPct: in.HeadroomPct, Groups: in.Groups, Result: r}
	return a.render(mp, func(w io.Writer) { writeMetricsPlan(w, mp, in, r) })
}

func writeMetricsPlan(w io.Writer, mp metricsPlan, in planInput, r planResult) {
	group := "group " + mp.Group
	if mp.Group == "" {
		group = "every group"
	}
	fmt.Fprintf(w, "Measured on %s over %s (topic %s, %s):\n\n", mp.URL, strconv.FormatFloat(mp.WindowS, 'f', 1, 64)+"s", mp.Topic, group)
	tw := newTable(w)
	row(tw, "published here", fmt.Sprintf("%.1f msgs/s", mp.PublishedPerS), "(spool_publish_messages_total: this sidecar's producers)")
	row(tw, "processed", fmt.Sprintf("%.1f msgs/s", mp.ProcessedPerS), "(spool_settlements_total, ack and dead_letter)")
	row(tw, "lag growth", fmt.Sprintf("%+.1f msgs/s", mp.LagGrowthPerS), "(spool_lag_messages)")
	row(tw, "arriving", fmt.Sprintf("%.1f msgs/s", mp.ArrivalPerS), "= max(published here, processed + lag growth): the rate to plan for")
	row(tw, "message size", bytesText(float64(mp.MessageBytes), false), "(spool_publish_bytes_total / messages)")
	row(tw, "processing", in.Processing.String()+" per message", "(spool_handle_latency_seconds: mean)")
	tw.Flush()
	fmt.Fprintln(w)
	writePlan(w, in, r)
	fmt.Fprintln(w)
	verdict := func(ok bool) string {
		if ok {
			return "enough"
		}
		return "NOT ENOUGH"
	}
	tw = newTable(w)
	row(tw, "partitions", fmt.Sprintf("%s has %d; needs ≥ %s (use %s)", mp.Topic, mp.Partitions, thousands(r.PartitionsMin), thousands(r.Partitions)), verdict(mp.EnoughPartitions))
	row(tw, "consumers", fmt.Sprintf("%d connected; needs %s at %d handlers each", mp.Consumers, thousands(r.Consumers), in.HandlersPerConsumer), verdict(mp.EnoughConsumers))
	lag := fmt.Sprintf("oldest unprocessed %s old, %+.2f s per s", ageText(int64(mp.LagS*1000)), mp.LagAgeGrowthSPerS)
	if mp.HeadingPastRetained {
		row(tw, "lag", lag, fmt.Sprintf("HEADING PAST RETENTION (%s) in about %s", durationText(time.Duration(mp.RetentionS)*time.Second), (time.Duration(mp.PastRetentionInS)*time.Second).String()))
	} else {
		row(tw, "lag", lag, fmt.Sprintf("not growing: not heading past retention (%s)", durationText(time.Duration(mp.RetentionS)*time.Second)))
	}
	tw.Flush()
}
