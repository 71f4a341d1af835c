// Command app is the Go SDK's conformance app: the harness in
// sdk/conformance starts it with a JSON spec as its only argument and reads
// one JSON event per line from its stdout. Every SDK has the same app
// (sdk/conformance/apps/<lang>); sdk/conformance/README.md is the contract.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	spool "github.com/spoolmq/spool/sdk/go"
)

type outMessage struct {
	ID           string `json:"id"`
	Key          string `json:"key"`
	Payload      string `json:"payload"`
	PayloadBytes int    `json:"payload_bytes"`
}

type spec struct {
	Addr           string       `json:"addr"`
	Mode           string       `json:"mode"` // consume | publish
	Group          string       `json:"group"`
	Topics         []string     `json:"topics"`
	Concurrency    int          `json:"concurrency"`
	Prefetch       int          `json:"prefetch"`
	DelayMs        int          `json:"delay_ms"`
	DrainTimeoutMs int          `json:"drain_timeout_ms"`
	Topic          string       `json:"topic"`
	Messages       []outMessage `json:"messages"`
}

// events writes one JSON object per line to stdout, one write per line.
type events struct{ mu sync.Mutex }

func (e *events) emit(v map[string]any) {
	b, _ := json.Marshal(v)
	e.mu.Lock()
	defer e.mu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func main() {
	var s spec
	if len(os.Args) != 2 || json.Unmarshal([]byte(os.Args[1]), &s) != nil {
		fmt.Fprintln(os.Stderr, "usage: app '<json spec>' (see sdk/conformance/README.md)")
		os.Exit(2)
	}
	ev := &events{}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	client, err := spool.Dial(ctx, s.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(2)
	}
	defer client.Close()
	switch s.Mode {
	case "consume":
		os.Exit(consume(ctx, client, s, ev))
	case "publish":
		publish(ctx, client, s, ev)
	default:
		fmt.Fprintf(os.Stderr, "app: unknown mode %q\n", s.Mode)
		os.Exit(2)
	}
}

// directives parses a payload's space-separated name=value words.
func directives(payload string) map[string]string {
	d := map[string]string{}
	for _, w := range strings.Fields(payload) {
		k, v, _ := strings.Cut(w, "=")
		d[k] = v
	}
	return d
}

func consume(ctx context.Context, client *spool.Client, s spec, ev *events) int {
	var seenMu sync.Mutex
	seen := map[string]int{} // deliveries of each id in this process
	handler := func(ctx context.Context, m *spool.Message) error {
		seenMu.Lock()
		seen[m.ID]++
		n := seen[m.ID]
		seenMu.Unlock()
		ev.emit(map[string]any{"ev": "start", "id": m.ID, "key": string(m.Key), "payload": string(m.Payload),
			"attempt": m.Attempt, "partition": m.Partition, "offset": m.Offset, "token": m.FencingToken, "last_error": m.LastError,
			"time_ms": time.Now().UnixMilli()})
		finish := func(outcome string) {
			ev.emit(map[string]any{"ev": "finish", "id": m.ID, "key": string(m.Key), "attempt": m.Attempt, "outcome": outcome, "time_ms": time.Now().UnixMilli()})
		}
		if s.DelayMs > 0 {
			select {
			case <-time.After(time.Duration(s.DelayMs) * time.Millisecond):
			case <-ctx.Done():
				finish("cancelled")
				return ctx.Err()
			}
		}
		d := directives(string(m.Payload))
		if v, ok := d["release"]; ok {
			if r, _ := strconv.Atoi(v); n <= r {
				finish("release")
				return spool.Release()
			}
		}
		if v, ok := d["fail"]; ok {
			if f, _ := strconv.Atoi(v); int(m.Attempt) <= f {
				finish("retry")
				err := fmt.Errorf("fail attempt %d", m.Attempt)
				if ra, ok := d["retry_after"]; ok {
					ms, _ := strconv.Atoi(ra)
					return spool.Retry(time.Duration(ms)*time.Millisecond, err)
				}
				return err
			}
		}
		if reason, ok := d["dead"]; ok {
			finish("dead")
			return spool.DeadLetter(reason)
		}
		finish("ack")
		return nil
	}
	var stats spool.Stats
	opts := []spool.SubscribeOption{
		spool.WithConcurrency(s.Concurrency), spool.WithPrefetch(s.Prefetch), spool.WithStats(&stats),
		spool.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))), spool.WithAppVersion("conformance-go"),
	}
	if s.DrainTimeoutMs > 0 {
		opts = append(opts, spool.WithDrainTimeout(time.Duration(s.DrainTimeoutMs)*time.Millisecond))
	}
	err := client.Subscribe(ctx, s.Group, s.Topics, handler, opts...)
	if err != nil {
		ev.emit(errorEvent("subscribe_error", err))
		return 1
	}
	ev.emit(map[string]any{"ev": "exit", "released": stats.Released.Load(), "settle_errors": stats.SettleErrors.Load()})
	return 0
}

func publish(ctx context.Context, client *spool.Client, s spec, ev *events) {
	msgs := make([]spool.OutMessage, len(s.Messages))
	for i, m := range s.Messages {
		payload := []byte(m.Payload)
		if m.PayloadBytes > 0 {
			payload = []byte(strings.Repeat("x", m.PayloadBytes))
		}
		msgs[i] = spool.OutMessage{ID: m.ID, Key: []byte(m.Key), Payload: payload}
	}
	res, err := client.PublishBatch(ctx, s.Topic, msgs)
	if err != nil {
		ev.emit(errorEvent("publish_error", err))
		return
	}
	results := make([]map[string]any, len(res))
	for i, r := range res {
		results[i] = map[string]any{"id": r.ID, "partition": r.Partition, "offset": r.Offset}
	}
	ev.emit(map[string]any{"ev": "published", "results": results})
}

// errorEvent describes err as the SDK surfaces it: the Go SDK wraps the
// gRPC status (errors.As finds it; status.FromError unwraps), whose
// ErrorInfo carries the sidecar's reason.
func errorEvent(kind string, err error) map[string]any {
	e := map[string]any{"ev": kind, "message": err.Error()}
	if st, ok := status.FromError(err); ok {
		e["type"] = "*status.Status"
		e["code"] = st.Code().String()
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				e["reason"] = ei.GetReason()
			}
		}
	}
	return e
}
