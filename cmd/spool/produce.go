package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
)

// produceBatch is how many stdin lines go into one Publish call (well
// under spoold's limits.max_batch_messages).
const produceBatch = 500

func (a *app) produceCommand() *cobra.Command {
	var addr, key, id, file string
	var headers []string
	var sched scheduleFlags
	c := &cobra.Command{
		Use:   "produce TOPIC [PAYLOAD...]",
		Short: "Publish messages: from arguments, a file, or stdin lines",
		Long: `Publishes to TOPIC through the sidecar's app address (PublisherService,
like an application), and prints where each message was stored once it is
durable.

  spool produce T a b c      three messages, payloads "a", "b", "c"
  spool produce T --file F   one message whose payload is the file's content
  spool produce T < F        one message per line of stdin

--key and --header apply to every message; --id only to a single message
(consumers dedupe by id, so re-running with the same --id is safe).
--deliver-at or --deliver-after schedule every message (docs/scheduling.md).`,
		Example: example(
			`spool produce order-placed '{"order":42}' --key order-42 --header source=cli`,
			`spool produce order-placed --file order.json --id order-42-placed`,
			`seq 1 1000 | spool produce demo --addr unix:///run/spool/app.sock`),
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, payloads := args[0], args[1:]
			atMs, afterMs, err := sched.fields()
			if err != nil {
				return err
			}
			hdrs := map[string]string{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return usageErr("--header %q: use name=value", h)
				}
				hdrs[k] = v
			}
			msgs, err := a.producePayloads(file, payloads)
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				return usageErr("nothing to publish: give payloads as arguments, --file, or lines on stdin")
			}
			if id != "" && len(msgs) > 1 {
				return usageErr("--id names one message, and there are %d: drop --id (spoold gives each an id) or publish them one by one", len(msgs))
			}
			conn, err := a.dial(addr, "--addr")
			if err != nil {
				return err
			}
			pub := spoolv1.NewPublisherServiceClient(conn)
			views := []publishedView{}
			for len(msgs) > 0 {
				n := min(len(msgs), produceBatch)
				req := &spoolv1.PublishRequest{Topic: topic}
				for _, p := range msgs[:n] {
					m := &spoolv1.PublishMessage{Id: id, Payload: p, Headers: hdrs, DeliverAtMs: atMs, DeliverAfterMs: afterMs, DeliverInKeyOrder: sched.inKeyOrder}
					if key != "" {
						m.Key = []byte(key)
					}
					req.Messages = append(req.Messages, m)
				}
				msgs = msgs[n:]
				ctx, cancel := a.call(cmd)
				resp, err := pub.Publish(ctx, req)
				cancel()
				if err != nil {
					what := "publish to " + topic
					if len(views) > 0 {
						what += fmt.Sprintf(" (the first %d messages were published)", len(views))
					}
					return callError(what, addr, "--addr or "+envApp, err)
				}
				for _, r := range resp.GetResults() {
					mid := r.GetId()
					if a.redact && id == "" {
						mid = "<id>"
					}
					views = append(views, publishedView{ID: mid, Partition: r.GetPartition(), Offset: r.GetOffset()})
				}
			}
			return a.render(views, func(w io.Writer) {
				tw := newTable(w)
				row(tw, "ID", "PARTITION", "OFFSET")
				for _, v := range views {
					row(tw, v.ID, v.Partition, v.Offset)
				}
				tw.Flush()
			})
		},
	}
	app, ok := a.getenv(envApp)
	if !ok || app == "" {
		app = config.DefaultAppListen
	}
	fl := c.Flags()
	fl.StringVar(&addr, "addr", app, "spoold's app address: host:port or unix:///path ("+envApp+")")
	fl.StringVar(&key, "key", "", "message key (messages with one key keep their order)")
	fl.StringArrayVar(&headers, "header", nil, "header name=value; repeatable")
	fl.StringVar(&id, "id", "", "message id, for a single message (default: one chosen by spoold)")
	fl.StringVar(&file, "file", "", "publish this file's content as one message")
	sched.bind(c)
	return c
}

// producePayloads are the messages to publish: the arguments, the file's
// content, or stdin's lines.
func (a *app) producePayloads(file string, payloads []string) ([][]byte, error) {
	var msgs [][]byte
	switch {
	case file != "" && len(payloads) > 0:
		return nil, usageErr("give payloads as arguments or --file, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usageErr("--file: %v", err)
		}
		msgs = [][]byte{b}
	case len(payloads) > 0:
		for _, p := range payloads {
			msgs = append(msgs, []byte(p))
		}
	default:
		sc := bufio.NewScanner(a.stdin)
		sc.Buffer(make([]byte, 64<<10), 2<<20)
		for sc.Scan() {
			msgs = append(msgs, []byte(sc.Text()))
		}
		if err := sc.Err(); err != nil {
			return nil, failed("reading stdin: %v (lines longer than 2 MiB: use --file)", err)
		}
	}
	return msgs, nil
}

type publishedView struct {
	ID        string `json:"id" yaml:"id"`
	Partition int32  `json:"partition" yaml:"partition"`
	Offset    int64  `json:"offset" yaml:"offset"`
}
