package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) dlqListCommand() *cobra.Command {
	var f dlqFlags
	var entries bool
	var limit uint32
	var topKeys uint32
	var cur string
	c := &cobra.Command{
		Use:   "list --group GROUP --topic TOPIC",
		Short: "Count dead letters by reason, hour and key, or list them one per line",
		Long: `Counts the matching dead letters of a subscription: how many, the oldest and
newest, and how many per reason, per hour and for the most frequent keys.
spoold counts one bounded page of the dead-letter topic per call; spool adds
the pages up (key counts add up the most frequent keys of each page, so with
more than one page they are a lower bound: "≥").

--entries lists the entries instead, one per line, oldest first (up to
--limit): where they are, when, attempts, key, reason and the start of the
payload. ` + "`spool dlq peek`" + ` shows them in full.`,
		Example: example(
			"spool dlq list --group email-workers --topic order-placed",
			"spool dlq list --group email-workers --topic order-placed --since 24h -o json",
			"spool dlq list --group email-workers --topic order-placed --entries --reason timeout --limit 200"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flt, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			if entries {
				return a.dlqListEntries(cmd, f, flt, limit, cur)
			}
			if cur != "" {
				return usageErr("--cursor goes with --entries (a count always reads to the end)")
			}
			if topKeys < 1 || topKeys > 100 {
				return usageErr("--top-keys %d: use 1..100", topKeys)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			v := dlqSummaryView{Group: f.group, Topic: f.topic, ByReason: []countView{}, ByHour: []countView{}, ByKey: []countView{}}
			reasons, hours, keys := map[string]uint64{}, map[int64]uint64{}, map[string]uint64{}
			var cur string
			for {
				ctx, cancel := a.call(cmd)
				resp, err := c.SummarizeDeadLetters(ctx, &spoolv1.SummarizeDeadLettersRequest{Group: f.group, Topic: f.topic, Filter: flt, Cursor: cur, TopKeys: topKeys})
				cancel()
				if err != nil {
					a.progressDone()
					return a.adminErr(fmt.Sprintf("count dead letters of %s/%s", f.topic, f.group), err)
				}
				v.Pages++
				v.Matched += resp.GetMatched()
				for _, r := range resp.GetByReason() {
					reasons[r.GetReason()] += r.GetCount()
				}
				for _, h := range resp.GetByHour() {
					hours[h.GetHourStartMs()] += h.GetCount()
				}
				for _, k := range resp.GetByKey() {
					keys[string(k.GetKey())] += k.GetCount()
				}
				if resp.GetMatched() > 0 {
					if v.oldest == 0 || resp.GetOldestMs() < v.oldest {
						v.oldest = resp.GetOldestMs()
					}
					v.newest = max(v.newest, resp.GetNewestMs())
				}
				a.progress("counting", resp.GetProgress(), fmt.Sprintf("%d matched", v.Matched))
				if cur = resp.GetNextCursor(); cur == "" {
					break
				}
			}
			a.progressDone()
			v.Oldest, v.Newest = a.timeText(v.oldest), a.timeText(v.newest)
			for r, n := range reasons {
				v.ByReason = append(v.ByReason, countView{Value: r, Count: n})
			}
			for h, n := range hours {
				v.ByHour = append(v.ByHour, countView{Value: a.timeText(h), Count: n, at: h})
			}
			for k, n := range keys {
				v.ByKey = append(v.ByKey, countView{Value: k, Count: n})
			}
			byCount := func(x, y countView) int { return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Value, y.Value)) }
			slices.SortFunc(v.ByReason, byCount)
			slices.SortFunc(v.ByKey, byCount)
			slices.SortFunc(v.ByHour, func(x, y countView) int { return cmp.Compare(x.at, y.at) })
			v.ByKey = v.ByKey[:min(len(v.ByKey), int(topKeys))]
			v.KeysExact = v.Pages == 1
			return a.render(v, func(w io.Writer) { writeDLQSummary(w, v) })
		},
	}
	f.bind(a, c)
	c.Flags().BoolVar(&entries, "entries", false, "list the entries one per line instead of counting")
	c.Flags().Uint32Var(&limit, "limit", 100, "with --entries: at most this many (1..100000)")
	c.Flags().Uint32Var(&topKeys, "top-keys", 10, "how many of the most frequent keys to show (1..100)")
	c.Flags().StringVar(&cur, "cursor", "", "with --entries: go on where a previous listing stopped (it prints the cursor)")
	return c
}

// dlqSummaryView is what dlq list counts.
type dlqSummaryView struct {
	Group    string      `json:"group" yaml:"group"`
	Topic    string      `json:"topic" yaml:"topic"`
	Matched  uint64      `json:"matched" yaml:"matched"`
	Oldest   string      `json:"oldest_time" yaml:"oldest_time"`
	Newest   string      `json:"newest_time" yaml:"newest_time"`
	ByReason []countView `json:"by_reason" yaml:"by_reason"`
	ByHour   []countView `json:"by_hour" yaml:"by_hour"`
	ByKey    []countView `json:"by_key" yaml:"by_key"`
	// KeysExact: the key counts are exact (one page); else lower bounds.
	KeysExact bool `json:"keys_exact" yaml:"keys_exact"`
	Pages     int  `json:"pages" yaml:"pages"`

	oldest, newest int64
}

type countView struct {
	Value string `json:"value" yaml:"value"`
	Count uint64 `json:"count" yaml:"count"`
	at    int64
}

func writeDLQSummary(w io.Writer, v dlqSummaryView) {
	if v.Matched == 0 {
		fmt.Fprintf(w, "no dead letters of group %s on topic %s match\n", v.Group, v.Topic)
		return
	}
	fmt.Fprintf(w, "%d dead letters of group %s on topic %s, dead-lettered from %s to %s\n", v.Matched, v.Group, v.Topic, v.Oldest, v.Newest)
	for _, part := range []struct {
		head string
		rows []countView
	}{{"REASON", v.ByReason}, {"HOUR (UTC)", v.ByHour}, {"KEY", v.ByKey}} {
		fmt.Fprintln(w)
		tw := newTable(w)
		row(tw, part.head, "COUNT")
		for _, r := range part.rows {
			val, count := r.Value, fmt.Sprint(r.Count)
			if part.head == "KEY" {
				if val == "" {
					val = "(no key)"
				} else {
					val = fmt.Sprintf("%q", val)
				}
				if !v.KeysExact {
					count = "≥ " + count
				}
			}
			row(tw, val, count)
		}
		tw.Flush()
	}
}

// dlqListEntries pages through PeekDeadLetters and lists the entries one
// per line.
func (a *app) dlqListEntries(cmd *cobra.Command, f dlqFlags, flt *spoolv1.DeadLetterFilter, limit uint32, cur string) error {
	if limit < 1 || limit > 100_000 {
		return usageErr("--limit %d: use 1..100000", limit)
	}
	c, err := a.adminClient()
	if err != nil {
		return err
	}
	views := []deadLetterView{}
	for {
		ctx, cancel := a.call(cmd)
		resp, err := c.PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Group: f.group, Topic: f.topic, Filter: flt, Limit: min(limit-uint32(len(views)), 1000), Cursor: cur})
		cancel()
		if err != nil {
			a.progressDone()
			return a.adminErr(fmt.Sprintf("list dead letters of %s/%s", f.topic, f.group), err)
		}
		for _, e := range resp.GetEntries() {
			views = append(views, a.deadLetterView(e))
		}
		a.progress("reading", resp.GetProgress(), fmt.Sprintf("%d listed", len(views)))
		if cur = resp.GetNextCursor(); cur == "" || len(views) >= int(limit) {
			break
		}
	}
	a.progressDone()
	err = a.render(views, func(w io.Writer) {
		if len(views) == 0 {
			fmt.Fprintf(w, "no dead letters of group %s on topic %s match\n", f.group, f.topic)
			return
		}
		writeDeadLetterRows(w, views)
	})
	if cur != "" {
		fmt.Fprintf(a.stderr, "more may match: raise --limit, or add --cursor %s to list on\n", cur)
	}
	return err
}

// writeDeadLetterRows is the one-line-per-entry table of dead letters.
func writeDeadLetterRows(w io.Writer, views []deadLetterView) {
	tw := newTable(w)
	row(tw, "DLQ OFFSET", "DEAD-LETTERED", "ATTEMPTS", "KEY", "REASON", "PAYLOAD")
	for _, s := range views {
		key := ""
		if s.Key != nil {
			key = *s.Key
		} else if s.KeyHex != nil {
			key = "0x" + *s.KeyHex
		}
		payload := fmt.Sprintf("(%d bytes, binary)", s.PayloadBytes)
		if s.Payload != nil {
			payload = clip(oneLine(*s.Payload), 40)
		}
		row(tw, fmt.Sprintf("%d/%d", s.DLQPartition, s.DLQOffset), s.DeadLettered, s.AttemptsMade, key, s.Reason, payload)
	}
	tw.Flush()
}
