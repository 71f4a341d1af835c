package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// dlqFlags select a subscription's dead letters.
type dlqFlags struct {
	app                      *app // completes --group and --topic from the sidecar
	group, topic             string
	from, to                 string
	since                    time.Duration
	reason, key              string
	minAttempts, maxAttempts uint32
}

func (f *dlqFlags) bind(a *app, c *cobra.Command) {
	f.app = a
	fl := c.Flags()
	fl.StringVar(&f.group, "group", "", "consumer group that dead-lettered the messages (required)")
	fl.StringVar(&f.topic, "topic", "", "original topic (required)")
	fl.StringVar(&f.from, "from", "", "only entries dead-lettered at or after this RFC 3339 time")
	fl.StringVar(&f.to, "to", "", "only entries dead-lettered before this RFC 3339 time")
	fl.DurationVar(&f.since, "since", 0, "only entries dead-lettered in this last while, like 1h (instead of --from)")
	fl.StringVar(&f.reason, "reason", "", "only entries with exactly this reason")
	fl.StringVar(&f.key, "key", "", "only entries with this message key")
	fl.Uint32Var(&f.minAttempts, "min-attempts", 0, "only entries with at least this many attempts")
	fl.Uint32Var(&f.maxAttempts, "max-attempts", 0, "only entries with at most this many attempts")
	_ = c.MarkFlagRequired("group")
	_ = c.MarkFlagRequired("topic")
	c.MarkFlagsMutuallyExclusive("from", "since")
	_ = c.RegisterFlagCompletionFunc("group", f.app.completeGroups)
	_ = c.RegisterFlagCompletionFunc("topic", f.app.completeTopics)
}

func (f *dlqFlags) filter(now time.Time) (*spoolv1.DeadLetterFilter, error) {
	flt := &spoolv1.DeadLetterFilter{Reason: f.reason, MinAttempts: f.minAttempts, MaxAttempts: f.maxAttempts}
	if f.maxAttempts > 0 && f.minAttempts > f.maxAttempts {
		return nil, usageErr("--min-attempts %d is above --max-attempts %d: nothing could match", f.minAttempts, f.maxAttempts)
	}
	if f.key != "" {
		flt.Key = []byte(f.key)
	}
	for _, tf := range []struct {
		name, v string
		dst     *int64
	}{{"--from", f.from, &flt.FromTimeMs}, {"--to", f.to, &flt.ToTimeMs}} {
		if tf.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, tf.v)
		if err != nil {
			return nil, usageErr("%s %q: use an RFC 3339 time like 2026-05-01T09:00:00Z", tf.name, tf.v)
		}
		*tf.dst = t.UnixMilli()
	}
	if f.since < 0 {
		return nil, usageErr("--since %s: use a positive duration like 1h", f.since)
	}
	if f.since > 0 {
		flt.FromTimeMs = now.Add(-f.since).UnixMilli()
	}
	return flt, nil
}

func (a *app) dlqCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "dlq",
		Short: "Count, read, redrive and purge dead letters",
		Long: `A subscription's dead letters are the messages its group gave up on (too
many attempts, or the application said so); they wait in the topic
TOPIC.dlq.GROUP. list counts them (by reason, hour and key) or lists them
one per line, peek reads them with their history, redrive delivers them to
the group again, purge hides those you are done with.

The filters (--since/--from/--to, --reason, --key, --min/--max-attempts) are
the same for list, peek and redrive. A time range is found through the log's
time index; the other filters are checked on each entry of the range. spoold
reads a bounded page of the dead-letter topic per call and spool pages
through, so a dead-letter topic of millions stays usable.`,
		Example: example(
			"spool dlq list --group email-workers --topic order-placed --since 24h",
			"spool dlq peek --group email-workers --topic order-placed --limit 5",
			"spool dlq redrive --group email-workers --topic order-placed --reason 'invalid email address' --dry-run",
			"spool dlq purge --group email-workers --topic order-placed --older-than 7d --yes"),
	}
	c.AddCommand(a.dlqListCommand(), a.dlqPeekCommand(), a.dlqRedriveCommand(), a.dlqPurgeCommand())
	return c
}

func (a *app) dlqPeekCommand() *cobra.Command {
	var f dlqFlags
	var limit uint32
	var cur string
	c := &cobra.Command{
		Use:   "peek --group GROUP --topic TOPIC",
		Short: "Show dead letters: payload, headers, reason, attempt history, app version",
		Long: `Shows dead letters of a subscription, oldest first, without moving them: the
original message (key, payload as text when printable, else hex; headers),
why it was dead-lettered, each failed attempt, and the versions of the
application and of spoold.

spool asks for pages until it has --limit entries or has read to the end.
When more may match, it says on stderr how to go on (--cursor).`,
		Example: example(
			"spool dlq peek --group email-workers --topic order-placed",
			"spool dlq peek --group email-workers --topic order-placed --since 1h --reason 'invalid email address'",
			"spool dlq peek --group email-workers --topic order-placed --key order-42 -o json",
			"spool dlq peek --group email-workers --topic order-placed --min-attempts 5 --cursor c1.AQQA..."),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flt, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			if limit < 1 || limit > 1000 {
				return usageErr("--limit %d: use 1..1000", limit)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			what := fmt.Sprintf("peek dead letters of %s/%s", f.topic, f.group)
			views := []deadLetterView{}
			for {
				ctx, cancel := a.call(cmd)
				resp, err := c.PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Group: f.group, Topic: f.topic, Filter: flt, Limit: limit - uint32(len(views)), Cursor: cur})
				cancel()
				if err != nil {
					return a.adminErr(what, err)
				}
				for _, e := range resp.GetEntries() {
					views = append(views, a.deadLetterView(e))
				}
				a.progress("reading", resp.GetProgress())
				if cur = resp.GetNextCursor(); cur == "" || len(views) >= int(limit) {
					break
				}
			}
			a.progressDone()
			err = a.render(views, func(w io.Writer) {
				if len(views) == 0 {
					fmt.Fprintf(w, "no dead letters of group %s on topic %s match\n", f.group, f.topic)
				}
				for i, v := range views {
					if i > 0 {
						fmt.Fprintln(w)
					}
					writeDeadLetter(w, v)
				}
			})
			if cur != "" {
				fmt.Fprintf(a.stderr, "more may match: add --cursor %s to read on\n", cur)
			}
			return err
		},
	}
	f.bind(a, c)
	c.Flags().Uint32Var(&limit, "limit", 20, "at most this many entries (1..1000)")
	c.Flags().StringVar(&cur, "cursor", "", "go on where a previous peek stopped (it prints the cursor)")
	return c
}

func (a *app) dlqRedriveCommand() *cobra.Command {
	var f dlqFlags
	var rate uint32
	var dryRun bool
	c := &cobra.Command{
		Use:   "redrive --group GROUP --topic TOPIC",
		Short: "Deliver dead letters to their group again, at a bounded rate",
		Long: `Appends the matching dead letters to their original partition again, for the
group that dead-lettered them only (other groups skip them), at most --rate
per second. A message the dedupe ledger shows as handled since is skipped
(counted as already done). Running a redrive again is safe. The entries stay
in the dead-letter topic (purge hides them).

spool redrives in calls of about one second of work each (--rate entries),
each going on where the previous one stopped, and draws a progress bar on a
terminal. The entries it considers are those present when it starts: the
messages it redrives that fail again are for the next redrive. Ctrl-C stops
between two calls' messages and says how far it got.

--dry-run counts what would move and shows the first entries.`,
		Example: example(
			"spool dlq redrive --group email-workers --topic order-placed --dry-run",
			"spool dlq redrive --group email-workers --topic order-placed --reason 'invalid email address' --rate 50",
			"spool dlq redrive --group email-workers --topic order-placed --since 2h --min-attempts 5 -o json"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flt, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			if rate < 1 || rate > 10_000 {
				return usageErr("--rate %d: use 1..10000 messages per second", rate)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			if !dryRun {
				fmt.Fprintf(a.stderr, "redriving dead letters of group %s on %s at up to %d/s (Ctrl-C stops it; running it again continues)\n", f.group, f.topic, rate)
			}
			v := redriveView{Group: f.group, Topic: f.topic, DryRun: dryRun, RatePerS: rate, Sample: []deadLetterView{}}
			// One call is about a second of work at the rate; a dry run
			// moves nothing and takes what one call may read.
			perCall := rate
			if dryRun {
				perCall = 10_000
			}
			start := time.Now()
			var cur string
			for {
				// No --timeout: a call lasts as long as its rate says.
				resp, err := c.Redrive(cmd.Context(), &spoolv1.RedriveRequest{Group: f.group, Topic: f.topic, Filter: flt, DryRun: dryRun, RatePerS: rate, Cursor: cur, Limit: perCall})
				if err != nil {
					a.progressDone()
					what := fmt.Sprintf("redrive dead letters of %s/%s", f.topic, f.group)
					if v.Redriven > 0 {
						what += fmt.Sprintf(" (%d redriven before this; running it again skips them as already done)", v.Redriven)
					}
					return a.adminErr(what, err)
				}
				v.Matched += resp.GetMatched()
				v.Redriven += resp.GetRedriven()
				v.AlreadyDone += resp.GetAlreadyDone()
				for _, e := range resp.GetSample() {
					if dryRun && len(v.Sample) < 100 {
						v.Sample = append(v.Sample, a.deadLetterView(e))
					}
				}
				a.progress("redrive", resp.GetProgress(), fmt.Sprintf("%d matched", v.Matched), fmt.Sprintf("%d redriven", v.Redriven))
				if cur = resp.GetNextCursor(); cur == "" {
					break
				}
			}
			a.progressDone()
			v.TookMs = time.Since(start).Milliseconds()
			if a.redact {
				v.TookMs = -1
			}
			return a.render(v, func(w io.Writer) { writeRedrive(w, v) })
		},
	}
	f.bind(a, c)
	c.Flags().Uint32Var(&rate, "rate", 100, "at most this many messages per second (1..10000)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count what would move and show the first entries; move nothing")
	return c
}

// deadLetterView is a dead letter as spool shows it. Key and payload are
// text when printable (key, payload) and hex otherwise (key_hex, payload_hex).
type deadLetterView struct {
	DLQPartition   int32             `json:"dlq_partition" yaml:"dlq_partition"`
	DLQOffset      int64             `json:"dlq_offset" yaml:"dlq_offset"`
	DeadLettered   string            `json:"dead_lettered_time" yaml:"dead_lettered_time"`
	Reason         string            `json:"reason" yaml:"reason"`
	AttemptsMade   int32             `json:"attempts_made" yaml:"attempts_made"`
	MessageID      string            `json:"message_id" yaml:"message_id"`
	Topic          string            `json:"topic" yaml:"topic"`
	Partition      int32             `json:"partition" yaml:"partition"`
	Offset         int64             `json:"offset" yaml:"offset"`
	Published      string            `json:"publish_time" yaml:"publish_time"`
	Key            *string           `json:"key,omitempty" yaml:"key,omitempty"`
	KeyHex         *string           `json:"key_hex,omitempty" yaml:"key_hex,omitempty"`
	Payload        *string           `json:"payload,omitempty" yaml:"payload,omitempty"`
	PayloadHex     *string           `json:"payload_hex,omitempty" yaml:"payload_hex,omitempty"`
	PayloadBytes   int               `json:"payload_bytes" yaml:"payload_bytes"`
	Headers        map[string]string `json:"headers" yaml:"headers"`
	Attempts       []attemptView     `json:"attempts" yaml:"attempts"`
	AppVersion     string            `json:"app_version" yaml:"app_version"`
	SidecarVersion string            `json:"sidecar_version" yaml:"sidecar_version"`
}

type attemptView struct {
	Attempt int32  `json:"attempt" yaml:"attempt"`
	Time    string `json:"time" yaml:"time"`
	Error   string `json:"error" yaml:"error"`
}

func (a *app) deadLetterView(e *spoolv1.DeadLetter) deadLetterView {
	m := e.GetMessage()
	v := deadLetterView{
		DLQPartition: e.GetDlqPartition(), DLQOffset: e.GetDlqOffset(), DeadLettered: a.timeText(e.GetDeadLetteredTimeMs()),
		Reason: e.GetReason(), AttemptsMade: m.GetAttempt(), MessageID: m.GetMessageId(), Topic: m.GetTopic(), Partition: m.GetPartition(), Offset: m.GetOffset(),
		Published: a.timeText(m.GetPublishTimeMs()), PayloadBytes: len(m.GetPayload()), Headers: m.GetHeaders(),
		Attempts: []attemptView{}, AppVersion: e.GetAppVersion(), SidecarVersion: e.GetSidecarVersion(),
	}
	if a.redact && v.SidecarVersion != "" {
		v.SidecarVersion = "<version>"
	}
	if a.redact && generatedID.MatchString(v.MessageID) {
		v.MessageID = "<id>"
	}
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	if len(m.GetKey()) > 0 {
		v.Key, v.KeyHex = textOrHex(m.GetKey())
	}
	v.Payload, v.PayloadHex = textOrHex(m.GetPayload())
	for _, at := range e.GetAttempts() {
		v.Attempts = append(v.Attempts, attemptView{Attempt: at.GetAttempt(), Time: a.timeText(at.GetTimeMs()), Error: at.GetError()})
	}
	return v
}

// generatedID matches the ids spoold gives messages published without one
// (UUIDs), redacted in golden tests.
var generatedID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// textOrHex returns b as text when it is printable UTF-8 (tabs and
// newlines allowed), else as hex.
func textOrHex(b []byte) (text, hexText *string) {
	if printable(b) {
		s := string(b)
		return &s, nil
	}
	s := hex.EncodeToString(b)
	return nil, &s
}

func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
	}
	return true
}

func writeDeadLetter(w io.Writer, v deadLetterView) {
	fmt.Fprintf(w, "dead letter %d/%d  %s  reason: %s\n", v.DLQPartition, v.DLQOffset, v.DeadLettered, termText(v.Reason))
	tw := newTable(w)
	row(tw, "  message", fmt.Sprintf("%s (%s/%d offset %d, published %s)", v.MessageID, v.Topic, v.Partition, v.Offset, v.Published))
	switch {
	case v.Key != nil:
		row(tw, "  key", fmt.Sprintf("%q", *v.Key))
	case v.KeyHex != nil:
		row(tw, "  key (hex)", *v.KeyHex)
	}
	for _, k := range slices.Sorted(maps.Keys(v.Headers)) {
		row(tw, "  header", k+": "+v.Headers[k])
	}
	for _, at := range v.Attempts {
		row(tw, "  attempt", fmt.Sprintf("%d at %s: %s", at.Attempt, at.Time, oneLine(at.Error)))
	}
	if v.AppVersion != "" {
		row(tw, "  app version", v.AppVersion)
	}
	if v.SidecarVersion != "" {
		row(tw, "  spoold version", v.SidecarVersion)
	}
	tw.Flush()
	switch {
	case v.Payload != nil:
		fmt.Fprintf(w, "  payload (%d bytes, text):\n", v.PayloadBytes)
		for l := range strings.SplitSeq(*v.Payload, "\n") {
			fmt.Fprintf(w, "    %s\n", termText(l))
		}
	default:
		fmt.Fprintf(w, "  payload (%d bytes, hex):\n", v.PayloadBytes)
		b, _ := hex.DecodeString(*v.PayloadHex)
		for l := range strings.SplitSeq(strings.TrimRight(hex.Dump(b), "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

// redriveView is a redrive's summary.
type redriveView struct {
	Group       string           `json:"group" yaml:"group"`
	Topic       string           `json:"topic" yaml:"topic"`
	DryRun      bool             `json:"dry_run" yaml:"dry_run"`
	RatePerS    uint32           `json:"rate_per_s" yaml:"rate_per_s"`
	Matched     uint64           `json:"matched" yaml:"matched"`
	Redriven    uint64           `json:"redriven" yaml:"redriven"`
	AlreadyDone uint64           `json:"already_done" yaml:"already_done"`
	TookMs      int64            `json:"took_ms" yaml:"took_ms"`
	Sample      []deadLetterView `json:"sample" yaml:"sample"`
}

func writeRedrive(w io.Writer, v redriveView) {
	if v.DryRun {
		fmt.Fprintf(w, "dry run: %d dead letters of group %s on %s would be redriven; nothing moved\n", v.Matched, v.Group, v.Topic)
		if len(v.Sample) > 0 {
			fmt.Fprintf(w, "\nfirst %d:\n", len(v.Sample))
			writeDeadLetterRows(w, v.Sample)
		}
		return
	}
	tw := newTable(w)
	row(tw, "group", v.Group)
	row(tw, "topic", v.Topic)
	row(tw, "matched", v.Matched)
	row(tw, "redriven", v.Redriven)
	row(tw, "already done", fmt.Sprintf("%d (handled since they were dead-lettered: not redriven)", v.AlreadyDone))
	row(tw, "rate", fmt.Sprintf("up to %d/s", v.RatePerS))
	took := "<took>"
	if v.TookMs >= 0 {
		took = (time.Duration(v.TookMs) * time.Millisecond).String()
	}
	row(tw, "took", took)
	tw.Flush()
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
