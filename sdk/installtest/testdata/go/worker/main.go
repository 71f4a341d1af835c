// Command worker handles topic "orders" in group "workers" through the sidecar
// at $SPOOL_ADDR until it has handled N distinct messages, then drains and
// exits (SIGTERM drains and exits too).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	spool "github.com/spoolmq/spool/sdk/go"
)

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		log.Fatalf("usage: worker N: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, done := context.WithCancel(ctx)
	defer done()
	var mu sync.Mutex
	seen := map[string]bool{}
	err = spool.Subscribe(ctx, "", "workers", []string{"orders"},
		func(ctx context.Context, m *spool.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if !seen[m.ID] {
				seen[m.ID] = true
				fmt.Printf("handled %s attempt %d payload %q\n", m.ID, m.Attempt, m.Payload)
			}
			if len(seen) == n {
				done() // this handler's ack is still sent: the drain waits for it
			}
			return nil
		}, spool.WithConcurrency(4))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("drained after %d messages\n", len(seen))
}
