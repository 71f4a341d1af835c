// Command go-process is the Go SDK's consumer program for the loadtest
// (consumer_sdk: go-process): the same SDK as the loadtest's in-process
// consumer, run as a process of its own so that it compares with the other
// SDKs' programs process against process. loadtest/consumers/README.md is
// the contract: a JSON spec as the only argument, "ready" once connected,
// subscribe at the first line on stdin, the handled ids in batches on
// stdout ("i ID ID ..."), drain and an exit line when stdin ends.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
)

type spec struct {
	Addr        string            `json:"addr"`
	Group       string            `json:"group"`
	Topic       string            `json:"topic"`
	Name        string            `json:"name"`
	Concurrency int               `json:"concurrency"`
	Prefetch    int               `json:"prefetch"` // -1: the SDK's default
	ReportMs    int               `json:"report_ms"`
	Options     map[string]string `json:"options"`
}

// reporter buffers handled ids and writes them in batches: one append
// under a mutex per message, one write per batch.
type reporter struct {
	mu      sync.Mutex
	buf     []byte
	handled int64
	out     io.Writer
}

// flushBytes is the batch size that is written at once, without waiting
// for the timer.
const flushBytes = 64 << 10

func (r *reporter) add(id string) {
	r.mu.Lock()
	if len(r.buf) == 0 {
		r.buf = append(r.buf, 'i')
	}
	r.buf = append(r.buf, ' ')
	r.buf = append(r.buf, id...)
	r.handled++
	if len(r.buf) >= flushBytes {
		r.flushLocked()
	}
	r.mu.Unlock()
}

func (r *reporter) flush() {
	r.mu.Lock()
	r.flushLocked()
	r.mu.Unlock()
}

func (r *reporter) flushLocked() {
	if len(r.buf) == 0 {
		return
	}
	r.buf = append(r.buf, '\n')
	_, _ = r.out.Write(r.buf)
	r.buf = r.buf[:0]
}

func main() {
	var s spec
	if len(os.Args) != 2 || json.Unmarshal([]byte(os.Args[1]), &s) != nil {
		fmt.Fprintln(os.Stderr, "usage: go-process '<json spec>' (see loadtest/consumers/README.md)")
		os.Exit(2)
	}
	if err := run(s); err != nil {
		fmt.Fprintln(os.Stderr, "go-process:", err)
		os.Exit(1)
	}
}

func run(s spec) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := spool.Dial(ctx, s.Addr)
	if err != nil {
		return err
	}
	defer client.Close()
	rep := &reporter{out: os.Stdout}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("stdin ended before the start line: %w", err)
	}
	go func() { // stdin ending is the stop
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()

	var stop atomic.Bool
	tick := time.NewTicker(time.Duration(max(s.ReportMs, 1)) * time.Millisecond)
	defer tick.Stop()
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for range tick.C {
			rep.flush()
			if stop.Load() {
				return
			}
		}
	}()

	var stats spool.Stats
	opts := []spool.SubscribeOption{
		spool.WithConcurrency(s.Concurrency),
		spool.WithDrainTimeout(5 * time.Second),
		spool.WithConsumerName(s.Name),
		spool.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		spool.WithStats(&stats),
	}
	if s.Prefetch >= 0 {
		opts = append(opts, spool.WithPrefetch(s.Prefetch))
	}
	h := func(_ context.Context, m *spool.Message) error {
		rep.add(m.ID)
		return nil
	}
	subErr := client.Subscribe(ctx, s.Group, []string{s.Topic}, h, opts...)
	stop.Store(true)
	<-flushed
	rep.flush()
	exit, _ := json.Marshal(map[string]any{
		"ev": "exit", "handled": rep.handled, "settle_errors": stats.SettleErrors.Load(), "reconnects": stats.Reconnects.Load(),
	})
	fmt.Println(string(exit))
	if subErr != nil && ctx.Err() == nil {
		return subErr
	}
	return nil
}
