package spool_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

// sidecarForExample starts the SDK's in-process twin of spoold, so that the
// examples run; a real application dials its own sidecar instead
// (spool.Dial(ctx, "") uses $SPOOL_ADDR or 127.0.0.1:7070).
func sidecarForExample() (addr string, stop func()) {
	s, err := fakesidecar.Start(fakesidecar.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return s.Addr(), s.Stop
}

// An application publishes an order and handles it.
func Example() {
	addr, stop := sidecarForExample()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	client, err := spool.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	res, err := client.Publish(ctx, "orders", []byte("customer-42"), []byte(`{"total":1200}`), spool.WithID("order-1001"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published", res.ID)

	err = client.Subscribe(ctx, "billing", []string{"orders"}, func(ctx context.Context, m *spool.Message) error {
		fmt.Printf("attempt %d of %s: %s\n", m.Attempt, m.ID, m.Payload)
		cancel()   // stop after one message, for the example
		return nil // ACK
	})
	fmt.Println("subscribe returned", err)
	// Output:
	// published order-1001
	// attempt 1 of order-1001: {"total":1200}
	// subscribe returned <nil>
}

var errGatewayDown = errors.New("payment gateway: 503")

// Outcomes are what the handler returns.
func ExampleHandler() {
	var handler spool.Handler = func(ctx context.Context, m *spool.Message) error {
		switch {
		case len(m.Payload) == 0:
			return spool.DeadLetter("empty payload: the producer sent nothing") // poison: to the DLQ now
		case m.Headers["schema"] == "v0":
			return spool.DeadLetter("schema v0 is no longer supported")
		}
		if err := charge(ctx, m.Payload, m.ID, m.FencingToken); err != nil {
			if errors.Is(err, errGatewayDown) {
				// Feeds the sidecar's breaker for this downstream; try again in 10 s at the earliest.
				return spool.RetryDownstream("payment-gateway", 10*time.Second, err)
			}
			return err // RETRY after the subscription's backoff
		}
		return nil // ACK
	}
	_ = handler
}

func charge(context.Context, []byte, string, uint64) error { return nil }

// A Publisher pipelines publishes over one stream; each returns a Future.
func ExampleClient_Publisher() {
	addr, stop := sidecarForExample()
	defer stop()
	ctx := context.Background()
	client, err := spool.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	p := client.Publisher(ctx, "clicks", spool.WithMaxInFlight(256))
	futures := make([]*spool.Future, 3)
	for i := range futures {
		futures[i] = p.Publish([]byte("user-7"), []byte(fmt.Sprintf("click %d", i)))
	}
	for _, f := range futures {
		res, err := f.Wait(ctx)
		if err != nil {
			log.Fatal(err) // republish with the same WithID to stay idempotent
		}
		fmt.Println("durable at offset", res.Offset)
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// durable at offset 0
	// durable at offset 1
	// durable at offset 2
}

// Subscribe dials, consumes until ctx ends (SIGTERM, for example) and drains.
func ExampleSubscribe() {
	addr, stop := sidecarForExample()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := spool.Subscribe(ctx, addr, "billing", []string{"orders"},
		func(ctx context.Context, m *spool.Message) error { return nil },
		spool.WithConcurrency(16), spool.WithDrainTimeout(20*time.Second), spool.WithConsumerName("billing-7f9c"))
	fmt.Println(err)
	// Output: <nil>
}
