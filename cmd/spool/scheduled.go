package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
)

func (a *app) scheduledCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "scheduled",
		Short: "List and cancel scheduled messages (published with a delivery time)",
		Long: `Scheduled messages are published with a delivery time (spool produce
--deliver-at or --deliver-after; deliver_at_ms or deliver_after_ms in the API):
stored at once, delivered no sooner than their time. docs/scheduling.md.`,
		Example: example(
			"spool produce reminders 'call back' --key customer-7 --deliver-after 1h",
			"spool scheduled list reminders",
			"spool scheduled cancel reminders reminder-42 --key customer-7"),
	}
	c.AddCommand(a.scheduledListCommand(), a.scheduledCancelCommand())
	return c
}

// scheduledView is one scheduled message as listed.
type scheduledView struct {
	ID           string  `json:"id" yaml:"id"`
	Partition    int32   `json:"partition" yaml:"partition"`
	Offset       int64   `json:"offset" yaml:"offset"`
	Key          *string `json:"key,omitempty" yaml:"key,omitempty"`
	KeyHex       *string `json:"key_hex,omitempty" yaml:"key_hex,omitempty"`
	DeliverAt    string  `json:"deliver_at" yaml:"deliver_at"`
	Published    string  `json:"published" yaml:"published"`
	PayloadBytes uint32  `json:"payload_bytes" yaml:"payload_bytes"`
}

func (a *app) scheduledListCommand() *cobra.Command {
	var limit uint32
	var cur string
	c := &cobra.Command{
		Use:   "list TOPIC",
		Short: "List a topic's scheduled messages not yet due, by partition and offset",
		Long: `Lists the scheduled messages of TOPIC whose time has not come, partition by
partition in offset order (not in delivery-time order), up to --limit. When
more may follow it prints a cursor: --cursor goes on from there. Each call
reads a bounded part of the topic, so a page can be short.`,
		Example: example(
			"spool scheduled list reminders",
			"spool scheduled list reminders --limit 1000 -o json",
			"spool scheduled list reminders --cursor 2:18044"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if limit < 1 || limit > 100_000 {
				return usageErr("--limit %d: use 1..100000", limit)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			views := []scheduledView{}
			for {
				ctx, cancel := a.call(cmd)
				resp, err := c.ListScheduled(ctx, &spoolv1.ListScheduledRequest{Topic: topic, Limit: min(limit-uint32(len(views)), 1000), Cursor: cur})
				cancel()
				if err != nil {
					return a.adminErr("list scheduled messages of "+topic, err)
				}
				for _, m := range resp.GetMessages() {
					v := scheduledView{ID: m.GetId(), Partition: m.GetPartition(), Offset: m.GetOffset(),
						DeliverAt: a.timeText(m.GetDeliverAtMs()), Published: a.timeText(m.GetPublishTimeMs()), PayloadBytes: m.GetPayloadBytes()}
					v.Key, v.KeyHex = textOrHex(m.GetKey())
					views = append(views, v)
				}
				if cur = resp.GetNextCursor(); cur == "" || len(views) >= int(limit) {
					break
				}
			}
			err = a.render(views, func(w io.Writer) {
				if len(views) == 0 {
					fmt.Fprintf(w, "no scheduled messages of topic %s are waiting\n", topic)
					return
				}
				tw := newTable(w)
				row(tw, "PARTITION/OFFSET", "DELIVER AT", "ID", "KEY", "PUBLISHED", "PAYLOAD")
				for _, v := range views {
					key := ""
					if v.Key != nil {
						key = *v.Key
					} else if v.KeyHex != nil {
						key = "0x" + *v.KeyHex
					}
					row(tw, fmt.Sprintf("%d/%d", v.Partition, v.Offset), v.DeliverAt, v.ID, key, v.Published, fmt.Sprintf("%d bytes", v.PayloadBytes))
				}
				tw.Flush()
			})
			if cur != "" {
				fmt.Fprintf(a.stderr, "more may follow: raise --limit, or add --cursor %s to list on\n", cur)
			}
			return err
		},
	}
	c.Flags().Uint32Var(&limit, "limit", 100, "at most this many (1..100000)")
	c.Flags().StringVar(&cur, "cursor", "", "go on where a previous listing stopped (it prints the cursor)")
	return c
}

// cancelledView is what scheduled cancel prints.
type cancelledView struct {
	ID        string `json:"id" yaml:"id"`
	Partition int32  `json:"partition" yaml:"partition"`
	Offset    int64  `json:"offset" yaml:"offset"`
	DeliverAt string `json:"deliver_at" yaml:"deliver_at"`
}

func (a *app) scheduledCancelCommand() *cobra.Command {
	var addr, key string
	var partition int32
	var offset int64
	c := &cobra.Command{
		Use:   "cancel TOPIC ID",
		Short: "Cancel a scheduled message before its time",
		Long: `Cancels the scheduled message ID of TOPIC through the sidecar's app address
(PublisherService.CancelScheduled, like an application). A consumer group
that reads the cancel before the message's time does not deliver it.
Without --partition and --offset (as its publish printed them) spoold
searches for the id: in the key's partition with --key, else in every
partition, from the start of the log. Refused once the message is due
(SCHEDULE_DUE), or when no scheduled message has the id
(UNKNOWN_SCHEDULED_MESSAGE). Cancelling twice is not an error.`,
		Example: example(
			"spool scheduled cancel reminders reminder-42 --partition 3 --offset 1187",
			"spool scheduled cancel reminders reminder-42 --key customer-7"),
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &spoolv1.CancelScheduledRequest{Topic: args[0], Id: args[1], Key: []byte(key)}
			fl := cmd.Flags()
			if fl.Changed("partition") != fl.Changed("offset") {
				return usageErr("--partition and --offset go together (as the publish printed them)")
			}
			if fl.Changed("partition") {
				req.Partition, req.Offset = &partition, &offset
			}
			conn, err := a.dial(addr, "--addr")
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			resp, err := spoolv1.NewPublisherServiceClient(conn).CancelScheduled(ctx, req)
			if err != nil {
				return callError(fmt.Sprintf("cancel scheduled message %s of %s", args[1], args[0]), addr, "--addr or "+envApp, err)
			}
			v := cancelledView{ID: args[1], Partition: resp.GetPartition(), Offset: resp.GetOffset(), DeliverAt: a.timeText(resp.GetDeliverAtMs())}
			return a.render(v, func(w io.Writer) {
				row(w, fmt.Sprintf("cancelled %s (partition %d offset %d), which was due at %s", v.ID, v.Partition, v.Offset, v.DeliverAt))
			})
		},
	}
	app, ok := a.getenv(envApp)
	if !ok || app == "" {
		app = config.DefaultAppListen
	}
	fl := c.Flags()
	fl.StringVar(&addr, "addr", app, "spoold's app address: host:port or unix:///path ("+envApp+")")
	fl.StringVar(&key, "key", "", "the message's key: search only its partition")
	fl.Int32Var(&partition, "partition", 0, "the message's partition, as its publish printed it (with --offset)")
	fl.Int64Var(&offset, "offset", 0, "the message's offset, as its publish printed it (with --partition)")
	return c
}

// scheduleFlags are produce's --deliver-at and --deliver-after.
type scheduleFlags struct {
	at         string
	after      time.Duration
	inKeyOrder bool
}

func (f *scheduleFlags) bind(c *cobra.Command) {
	c.Flags().StringVar(&f.at, "deliver-at", "", "deliver no sooner than this time, RFC 3339 with its zone (2027-03-01T09:00:00Z); docs/scheduling.md")
	c.Flags().DurationVar(&f.after, "deliver-after", 0, "deliver no sooner than this long after spoold receives the message (1s..8760h)")
	c.Flags().BoolVar(&f.inKeyOrder, "deliver-in-key-order", false, "keep the scheduled message in its key's order: the key's later messages wait for it")
}

// fields are the publish's deliver_at_ms and deliver_after_ms.
func (f *scheduleFlags) fields() (atMs, afterMs int64, err error) {
	if f.at != "" && f.after != 0 {
		return 0, 0, usageErr("--deliver-at and --deliver-after: give one of them")
	}
	if f.after < 0 {
		return 0, 0, usageErr("--deliver-after %v: a delay cannot be negative", f.after)
	}
	if f.at != "" {
		t, err := time.Parse(time.RFC3339Nano, f.at)
		if err != nil {
			hint := ""
			if !strings.ContainsAny(f.at, "Zz+") && strings.Count(f.at, "-") <= 2 {
				hint = " (a time without its zone is ambiguous: end it with Z for UTC or an offset like +02:00)"
			}
			return 0, 0, usageErr("--deliver-at %q: use RFC 3339, for example 2027-03-01T09:00:00Z%s", f.at, hint)
		}
		atMs = t.UnixMilli()
		if time.UnixMilli(atMs).Before(t) {
			atMs++
		}
	}
	return atMs, f.after.Milliseconds(), nil
}
