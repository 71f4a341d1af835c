package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) tailCommand() *cobra.Command {
	var fromOffset int64
	var fromTime, group string
	var fromBeginning, showHeaders bool
	var partitions []int32
	var limit int
	c := &cobra.Command{
		Use:   "tail TOPIC",
		Short: "Follow a topic live: messages as they are stored, and a group's deliveries, progress and dead letters",
		Long: `Prints the messages appended to TOPIC as they become durable, from now on
(default), from an offset in every partition followed (--from-offset), from a
time (--from-time) or from the oldest stored (--from-beginning), until Ctrl-C
or --limit messages.

--group G also shows, as they happen, each step of this sidecar's deliveries
to its app (delivered to a consumer, acked, retry with the app's error,
dead_letter with the reason, released), the group's progress on each
partition (its committed offset moving past the messages: they were
processed) and the messages it dead-letters. Steps a slow reader cannot take
are dropped (at most 1,024 wait), never slowing the deliveries.

Tables print one line per event; -o json prints one JSON object per line
(event: message, delivery, progress or dead_letter), -o yaml one document per
event.`,
		Example: example(
			"spool tail order-placed",
			"spool tail order-placed --from-offset 0 --partition 2 --limit 10",
			"spool tail order-placed --from-time 2026-05-01T09:00:00Z -o json",
			"spool tail order-placed --group email-workers"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			req := &spoolv1.TailRequest{Topic: topic, Partitions: partitions, Group: group}
			switch {
			case cmd.Flags().Changed("from-offset"):
				if fromOffset < 0 {
					return usageErr("--from-offset %d: use an offset, 0 or more", fromOffset)
				}
				req.From = &spoolv1.TailRequest_Offset{Offset: fromOffset}
			case fromTime != "":
				t, err := time.Parse(time.RFC3339, fromTime)
				if err != nil {
					return usageErr("--from-time %q: use an RFC 3339 time like 2026-05-01T09:00:00Z", fromTime)
				}
				req.From = &spoolv1.TailRequest_TimeMs{TimeMs: t.UnixMilli()}
			case fromBeginning:
				req.From = &spoolv1.TailRequest_Earliest{Earliest: true}
			}
			if limit < 0 {
				return usageErr("--limit %d: use 1 or more, or 0 for no limit", limit)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			stream, err := c.Tail(ctx, req)
			if err != nil {
				return a.adminErr("tail "+topic, err)
			}
			messages := 0
			for limit == 0 || messages < limit {
				ev, err := stream.Recv()
				switch {
				case errors.Is(err, io.EOF):
					return nil
				case err != nil && (cmd.Context().Err() != nil || status.Code(err) == codes.Canceled):
					return nil // Ctrl-C: the way a tail ends
				case err != nil:
					return a.adminErr("tail "+topic, err)
				}
				v := a.tailEventView(topic, group, ev)
				if v.Event == "message" {
					messages++
				}
				if err := a.writeTailEvent(v, showHeaders); err != nil {
					return err
				}
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.Int64Var(&fromOffset, "from-offset", 0, "start at this offset in every partition followed")
	fl.StringVar(&fromTime, "from-time", "", "start at the first message stored at or after this RFC 3339 time")
	fl.BoolVar(&fromBeginning, "from-beginning", false, "start at the oldest stored message")
	fl.Int32SliceVar(&partitions, "partition", nil, "only this partition (repeatable); default all")
	fl.StringVar(&group, "group", "", "also show this group's progress, deliveries (this sidecar's) and dead letters on the topic")
	fl.IntVar(&limit, "limit", 0, "stop after this many messages (0: until Ctrl-C)")
	fl.BoolVar(&showHeaders, "headers", false, "tables: show each message's headers too")
	c.MarkFlagsMutuallyExclusive("from-offset", "from-time", "from-beginning")
	_ = c.RegisterFlagCompletionFunc("group", a.completeGroups)
	return c
}

// tailEventView is one event of spool tail (-o json: one per line).
type tailEventView struct {
	Event     string            `json:"event" yaml:"event"` // message, progress, dead_letter
	Topic     string            `json:"topic" yaml:"topic"`
	Partition int32             `json:"partition" yaml:"partition"`
	Offset    *int64            `json:"offset,omitempty" yaml:"offset,omitempty"`
	Time      string            `json:"time" yaml:"time"`
	ID        string            `json:"id,omitempty" yaml:"id,omitempty"`
	Key       *string           `json:"key,omitempty" yaml:"key,omitempty"`
	KeyHex    *string           `json:"key_hex,omitempty" yaml:"key_hex,omitempty"`
	Payload   *string           `json:"payload,omitempty" yaml:"payload,omitempty"`
	PayloadHx *string           `json:"payload_hex,omitempty" yaml:"payload_hex,omitempty"`
	Headers   map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	// progress
	Group       string `json:"group,omitempty" yaml:"group,omitempty"`
	Committed   *int64 `json:"committed_offset,omitempty" yaml:"committed_offset,omitempty"`
	EndOffset   *int64 `json:"end_offset,omitempty" yaml:"end_offset,omitempty"`
	LagMessages *int64 `json:"lag_messages,omitempty" yaml:"lag_messages,omitempty"`
	InFlight    *int64 `json:"in_flight,omitempty" yaml:"in_flight,omitempty"`
	// dead_letter
	DeadLetter *deadLetterView `json:"dead_letter,omitempty" yaml:"dead_letter,omitempty"`
	// delivery: a step of a delivery to the group's app
	Step     string `json:"step,omitempty" yaml:"step,omitempty"` // delivered, acked, retry, dead_letter, released
	Attempt  int32  `json:"attempt,omitempty" yaml:"attempt,omitempty"`
	Consumer string `json:"consumer,omitempty" yaml:"consumer,omitempty"`
	Error    string `json:"error,omitempty" yaml:"error,omitempty"`
	Reason   string `json:"reason,omitempty" yaml:"reason,omitempty"`
}

func (a *app) tailEventView(topic, group string, ev *spoolv1.TailResponse) tailEventView {
	switch e := ev.GetEvent().(type) {
	case *spoolv1.TailResponse_Record:
		r := e.Record
		off := r.GetOffset()
		v := tailEventView{Event: "message", Topic: topic, Partition: r.GetPartition(), Offset: &off, Time: a.timeText(r.GetTimeMs()), ID: r.GetId(), Headers: r.GetHeaders()}
		if a.redact && generatedID.MatchString(v.ID) {
			v.ID = "<id>"
		}
		if len(r.GetKey()) > 0 {
			v.Key, v.KeyHex = textOrHex(r.GetKey())
		}
		v.Payload, v.PayloadHx = textOrHex(r.GetPayload())
		return v
	case *spoolv1.TailResponse_Progress:
		p := e.Progress
		c, end, lag, inf := p.GetCommittedOffset(), p.GetEndOffset(), p.GetLagMessages(), int64(p.GetInFlight())
		return tailEventView{Event: "progress", Topic: topic, Partition: p.GetPartition(), Time: a.timeText(time.Now().UnixMilli()), Group: group,
			Committed: &c, EndOffset: &end, LagMessages: &lag, InFlight: &inf}
	case *spoolv1.TailResponse_Delivery:
		d := e.Delivery
		off := d.GetOffset()
		step := strings.ToLower(strings.TrimPrefix(d.GetKind().String(), "TAIL_DELIVERY_KIND_"))
		v := tailEventView{Event: "delivery", Topic: topic, Partition: d.GetPartition(), Offset: &off, Time: a.timeText(d.GetTimeMs()), Group: group,
			ID: d.GetId(), Step: step, Attempt: d.GetAttempt(), Consumer: d.GetConsumer(), Error: d.GetError(), Reason: d.GetReason()}
		if a.redact && generatedID.MatchString(v.ID) {
			v.ID = "<id>"
		}
		return v
	case *spoolv1.TailResponse_DeadLetter:
		dl := a.deadLetterView(e.DeadLetter)
		off := dl.Offset
		return tailEventView{Event: "dead_letter", Topic: topic, Partition: dl.Partition, Offset: &off, Time: dl.DeadLettered, Group: group, ID: dl.MessageID, DeadLetter: &dl}
	}
	return tailEventView{Event: "unknown", Topic: topic}
}

func (a *app) writeTailEvent(v tailEventView, headers bool) error {
	w := a.stdout
	switch a.output {
	case "json":
		enc := json.NewEncoder(w) // one object per line
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return failed("encoding JSON: %v", err)
		}
		return nil
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return failed("encoding YAML: %v", err)
		}
		fmt.Fprint(w, "---\n"+string(b))
		return nil
	}
	switch v.Event {
	case "message":
		key := "-"
		switch {
		case v.Key != nil:
			key = fmt.Sprintf("%q", *v.Key)
		case v.KeyHex != nil:
			key = "0x" + *v.KeyHex
		}
		payload := ""
		if v.Payload != nil {
			payload = oneLine(*v.Payload)
		} else {
			payload = "0x" + *v.PayloadHx
		}
		fmt.Fprintf(w, "%s  %s/%d@%d  key %s  id %s  %s\n", v.Time, v.Topic, v.Partition, *v.Offset, key, termText(v.ID), payload)
		if headers {
			for _, k := range slices.Sorted(maps.Keys(v.Headers)) {
				fmt.Fprintf(w, "    %s: %s\n", termText(k), termText(v.Headers[k]))
			}
		}
	case "progress":
		fmt.Fprintf(w, "%s  %s/%d  group %s: committed %d of %d (lag %d, %d in flight)\n", v.Time, v.Topic, v.Partition, v.Group, *v.Committed, *v.EndOffset, *v.LagMessages, *v.InFlight)
	case "delivery":
		what := v.Step
		switch {
		case v.Step == "delivered" && v.Consumer != "":
			what = "delivered to " + oneLine(v.Consumer)
		case v.Error != "" && v.Reason != "":
			what += ": " + oneLine(v.Reason) + ": " + oneLine(v.Error)
		case v.Error != "" || v.Reason != "":
			what += ": " + oneLine(v.Error+v.Reason)
		}
		fmt.Fprintf(w, "%s  %s/%d@%d  group %s  id %s  attempt %d  %s\n", v.Time, v.Topic, v.Partition, *v.Offset, v.Group, termText(v.ID), v.Attempt, what)
	case "dead_letter":
		d := v.DeadLetter
		fmt.Fprintf(w, "%s  %s/%d@%d  group %s dead-lettered %s after %d attempts: %s\n", v.Time, v.Topic, v.Partition, *v.Offset, v.Group, termText(d.MessageID), d.AttemptsMade, oneLine(d.Reason))
	}
	return nil
}
