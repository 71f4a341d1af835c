package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// planInput is what `spool plan` sizes from: peak numbers.
type planInput struct {
	RatePerS            int64         // peak messages per second
	MessageBytes        int64         // average message size
	Retention           time.Duration // how long messages are kept
	Replication         int64         // copies of each partition
	Processing          time.Duration // handler time per message
	HandlersPerConsumer int64         // concurrent handlers one consumer process runs
	HeadroomPct         int64         // extra partitions, percent
	Groups              int64         // consumer groups reading the topic
}

// planResult is the sizing; every figure is derived in sizePlan.
type planResult struct {
	InBytesPerS          int64   `json:"in_bytes_per_s" yaml:"in_bytes_per_s"`
	OutBytesPerS         int64   `json:"out_bytes_per_s" yaml:"out_bytes_per_s"`
	ReplicationBytesPerS int64   `json:"replication_bytes_per_s" yaml:"replication_bytes_per_s"`
	DiskBytesPerCopy     int64   `json:"disk_bytes_per_copy" yaml:"disk_bytes_per_copy"`
	DiskBytes            int64   `json:"disk_bytes" yaml:"disk_bytes"`
	PerHandlerPerS       float64 `json:"per_handler_msgs_per_s" yaml:"per_handler_msgs_per_s"`
	Handlers             int64   `json:"handlers" yaml:"handlers"`
	Consumers            int64   `json:"consumers" yaml:"consumers"`
	PartitionsMin        int64   `json:"partitions_min" yaml:"partitions_min"`
	Partitions           int64   `json:"partitions" yaml:"partitions"`
}

// sizePlan is the seed's sizing, in integers where the seed's examples
// must come out exact (20,000 × 50 ms is 1,000 handlers, not 1,000.0001):
//
//	in        = rate × size
//	out       = in × groups (each group reads everything once)
//	replicate = in × (replicas − 1) (the leader sends to each follower)
//	disk      = in × retention, × replicas
//	handlers  = rate × processing time (Little's law: L = λ·W), rounded up
//	consumers = handlers ÷ handlers per consumer, rounded up
//	partitions ≥ consumers (a partition is read by one consumer of a group),
//	            plus headroom, rounded up (changing the count later moves keys)
func sizePlan(in planInput) planResult {
	var r planResult
	r.InBytesPerS = in.RatePerS * in.MessageBytes
	r.OutBytesPerS = r.InBytesPerS * in.Groups
	r.ReplicationBytesPerS = r.InBytesPerS * (in.Replication - 1)
	r.DiskBytesPerCopy = r.InBytesPerS * in.Retention.Milliseconds() / 1000
	r.DiskBytes = r.DiskBytesPerCopy * in.Replication
	r.PerHandlerPerS = float64(time.Second) / float64(in.Processing)
	r.Handlers = ceilDiv(in.RatePerS*int64(in.Processing), int64(time.Second))
	r.Consumers = ceilDiv(r.Handlers, in.HandlersPerConsumer)
	r.PartitionsMin = r.Consumers
	r.Partitions = ceilDiv(r.PartitionsMin*(100+in.HeadroomPct), 100)
	return r
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func (in planInput) validate() error {
	switch {
	case in.RatePerS < 1:
		return usageErr("--rate %d: give the peak messages per second, at least 1", in.RatePerS)
	case in.MessageBytes < 1:
		return usageErr("--size: give the average message size, like 1KB")
	case in.Retention <= 0:
		return usageErr("--retention: give how long messages are kept, like 7d or 36h")
	case in.Replication < 1:
		return usageErr("--replication %d: use 1 (one copy) or more, like 3", in.Replication)
	case in.Processing <= 0:
		return usageErr("--processing-time: give the handler time per message, like 50ms")
	case in.HandlersPerConsumer < 1:
		return usageErr("--handlers-per-consumer %d: use 1 or more", in.HandlersPerConsumer)
	case in.HeadroomPct < 0:
		return usageErr("--headroom %d: use a percentage, 0 or more", in.HeadroomPct)
	case in.Groups < 1:
		return usageErr("--groups %d: use 1 or more", in.Groups)
	}
	return nil
}

func (a *app) planCommand() *cobra.Command {
	in := planInput{Replication: 3, HandlersPerConsumer: 10, HeadroomPct: 20, Groups: 1}
	size, retention := "1KB", "7d"
	var fromMetrics, topic, group string
	var window time.Duration
	c := &cobra.Command{
		Use:   "plan (--rate MSGS_PER_S --processing-time DURATION | --from-metrics URL --topic TOPIC)",
		Short: "Size a topic: bandwidth, disk, handlers (Little's law) and partitions, explained",
		Long: `Sizes a deployment from peak numbers, line by line: the bandwidth in and out,
the disk that the retention needs with its replicas, the concurrent handlers
needed to keep up (Little's law: handlers = rate × processing time), the
consumers that makes, and the partitions to create with headroom (changing
the count later moves keys to other partitions).

Sizes take decimal units (1KB = 1000 bytes, as the seed's arithmetic) or
binary ones (1KiB = 1024); retention takes days (7d) or Go durations (36h).

--from-metrics URL measures instead of asking: it reads a running sidecar's
/metrics twice, --window apart, and takes the rate arriving in --topic (the
larger of what was published through this sidecar and what --group
processed plus its lag growth), the mean message size and the mean handler
time (unless --size or --processing-time are given). Then it says whether
the topic has enough partitions, the group enough consumers, and whether the
lag is heading past --retention. Measure at peak.`,
		Example: example(
			"spool plan --rate 20000 --size 1KB --retention 7d --replication 3 --processing-time 50ms",
			"spool plan --rate 500 --processing-time 300ms --handlers-per-consumer 32 -o json",
			"spool plan --from-metrics http://127.0.0.1:7071/metrics --topic order-placed --group email-workers --window 30s"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if in.MessageBytes, err = parseSize(size); err != nil {
				return usageErr("--size %q: %v", size, err)
			}
			if in.Retention, err = parseRetention(retention); err != nil {
				return usageErr("--retention %q: %v", retention, err)
			}
			if fromMetrics != "" {
				if cmd.Flags().Changed("rate") {
					return usageErr("--rate and --from-metrics: give one (--from-metrics measures the rate)")
				}
				return a.planFromMetrics(cmd, fromMetrics, topic, group, window, in, cmd.Flags().Changed("size"), cmd.Flags().Changed("processing-time"))
			}
			if !cmd.Flags().Changed("rate") || !cmd.Flags().Changed("processing-time") {
				return usageErr("plan needs --rate and --processing-time (or --from-metrics URL --topic TOPIC to measure them)")
			}
			if err := in.validate(); err != nil {
				return err
			}
			r := sizePlan(in)
			v := planView{Rate: in.RatePerS, MessageBytes: in.MessageBytes, RetentionS: int64(in.Retention / time.Second),
				Replication: in.Replication, ProcessingMs: float64(in.Processing) / float64(time.Millisecond),
				HandlersPerConsumer: in.HandlersPerConsumer, HeadroomPct: in.HeadroomPct, Groups: in.Groups, Result: r}
			return a.render(v, func(w io.Writer) { writePlan(w, in, r) })
		},
	}
	fl := c.Flags()
	fl.Int64Var(&in.RatePerS, "rate", 0, "peak messages per second (required)")
	fl.StringVar(&size, "size", size, "average message size: 1KB, 512B, 4KiB")
	fl.StringVar(&retention, "retention", retention, "how long messages are kept: 7d, 36h")
	fl.Int64Var(&in.Replication, "replication", in.Replication, "copies of each partition (replication factor)")
	fl.DurationVar(&in.Processing, "processing-time", 0, "handler time per message, like 50ms (required)")
	fl.Int64Var(&in.HandlersPerConsumer, "handlers-per-consumer", in.HandlersPerConsumer, "concurrent handlers one consumer process runs (threads, SDK concurrency)")
	fl.Int64Var(&in.HeadroomPct, "headroom", in.HeadroomPct, "extra partitions beyond the minimum, percent")
	fl.Int64Var(&in.Groups, "groups", in.Groups, "consumer groups reading the topic (each reads everything)")
	fl.StringVar(&fromMetrics, "from-metrics", "", "measure rate, size and processing time from this sidecar /metrics URL")
	fl.StringVar(&topic, "topic", "", "with --from-metrics: the topic to size")
	fl.StringVar(&group, "group", "", "with --from-metrics: the consumer group (default: every group of the topic)")
	fl.DurationVar(&window, "window", 10*time.Second, "with --from-metrics: time between the two readings")
	return c
}

type planView struct {
	Rate                int64      `json:"rate_msgs_per_s" yaml:"rate_msgs_per_s"`
	MessageBytes        int64      `json:"message_bytes" yaml:"message_bytes"`
	RetentionS          int64      `json:"retention_s" yaml:"retention_s"`
	Replication         int64      `json:"replication" yaml:"replication"`
	ProcessingMs        float64    `json:"processing_ms" yaml:"processing_ms"`
	HandlersPerConsumer int64      `json:"handlers_per_consumer" yaml:"handlers_per_consumer"`
	HeadroomPct         int64      `json:"headroom_pct" yaml:"headroom_pct"`
	Groups              int64      `json:"groups" yaml:"groups"`
	Result              planResult `json:"result" yaml:"result"`
}

func writePlan(w io.Writer, in planInput, r planResult) {
	rate := bytesText(float64(r.InBytesPerS), false) + "/s"
	fmt.Fprintf(w, "Sizing for a peak of %s msgs/s of %s, kept %s, %d replicas, %s per message:\n\n",
		thousands(in.RatePerS), bytesText(float64(in.MessageBytes), false), durationText(in.Retention), in.Replication, in.Processing)
	tw := newTable(w)
	row(tw, "in", fmt.Sprintf("%s msgs/s × %s", thousands(in.RatePerS), bytesText(float64(in.MessageBytes), false)), "= "+rate+" in")
	row(tw, "out", fmt.Sprintf("%s × %d group(s) reading it all", rate, in.Groups), "= "+bytesText(float64(r.OutBytesPerS), false)+"/s out to consumers")
	if in.Replication > 1 {
		row(tw, "replication", fmt.Sprintf("%s × %d followers", rate, in.Replication-1), "= "+bytesText(float64(r.ReplicationBytesPerS), false)+"/s between nodes")
	}
	row(tw, "disk", fmt.Sprintf("%s × %s s (%s)", rate, thousands(int64(in.Retention/time.Second)), durationText(in.Retention)), "≈ "+bytesText(float64(r.DiskBytesPerCopy), false)+" per copy")
	row(tw, "", fmt.Sprintf("× %d replicas", in.Replication), "≈ "+bytesText(float64(r.DiskBytes), false)+" in all")
	row(tw, "per handler", fmt.Sprintf("1 s / %s per message", in.Processing), "= "+strconv.FormatFloat(r.PerHandlerPerS, 'f', -1, 64)+" msgs/s")
	row(tw, "handlers", fmt.Sprintf("%s msgs/s × %s (Little's law: L = λ × W)", thousands(in.RatePerS), in.Processing), "= "+thousands(r.Handlers)+" concurrent handlers")
	row(tw, "consumers", fmt.Sprintf("%s handlers / %d per consumer", thousands(r.Handlers), in.HandlersPerConsumer), "= "+thousands(r.Consumers)+" consumers")
	row(tw, "partitions", "one per consumer (one consumer reads a partition)", "≥ "+thousands(r.PartitionsMin))
	row(tw, "", fmt.Sprintf("+ %d%% headroom (adding later moves keys)", in.HeadroomPct), "→ use "+thousands(r.Partitions))
	tw.Flush()
}

// thousands writes n with comma separators: 20,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// bytesText writes a byte count with three significant digits: 20 MB,
// 12.1 TB (decimal), or 10 GiB (binary).
func bytesText(v float64, binary bool) string {
	base, units := 1000.0, []string{"B", "KB", "MB", "GB", "TB", "PB", "EB"}
	if binary {
		base, units = 1024, []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	}
	i := 0
	for v >= base && i < len(units)-1 {
		v /= base
		i++
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + " " + units[i]
}

// parseSize reads 512, 512B, 1KB, 1.5MB (decimal) or 4KiB (binary).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("use a positive size like 512B, 1KB or 4KiB")
	}
	return int64(f*mult + 0.5), nil
}

// parseRetention reads 7d (days) or a Go duration (36h).
func parseRetention(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("use whole days like 7d, or a duration like 36h")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("use whole days like 7d, or a duration like 36h")
	}
	return d, nil
}
