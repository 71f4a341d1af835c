package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	spool "github.com/spoolmq/spool/sdk/go"
)

// A message the config allows is accepted end to end: with
// limits.max_message_bytes at 16 MiB, 6 MiB and 15 MiB messages are stored
// and delivered, not refused by the log's batch limit (defect 5).
func TestLargeMessagesAllowedByConfigAreStoredAndDelivered(t *testing.T) {
	n := startNode(t, `
limits:
  max_message_bytes: 16777216
topics:
  - name: big
    partitions: 1
subscriptions:
  - topic: big
    group: readers
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := spool.Dial(ctx, n.app, spool.WithGRPCDialOptions(grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sizes := []int{6 << 20, 15 << 20}
	for _, size := range sizes {
		payload := make([]byte, size)
		payload[0], payload[size-1] = 'a', 'z'
		if _, err := c.Publish(ctx, "big", []byte("k"), payload); err != nil {
			t.Fatalf("publish of %d bytes under a 16 MiB limit: %v", size, err)
		}
	}
	var mu sync.Mutex
	var got []int
	subCtx, stop := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() {
		subDone <- c.Subscribe(subCtx, "readers", []string{"big"}, func(_ context.Context, m *spool.Message) error {
			if m.Payload[0] != 'a' || m.Payload[len(m.Payload)-1] != 'z' {
				t.Errorf("message of %d bytes came back altered", len(m.Payload))
			}
			mu.Lock()
			got = append(got, len(m.Payload))
			mu.Unlock()
			return nil
		})
	}()
	eventually(t, 30*time.Second, "both large messages delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(sizes)
	})
	stop()
	<-subDone
	mu.Lock()
	defer mu.Unlock()
	for i, size := range sizes {
		if got[i] != size {
			t.Fatalf("delivered sizes %v, want %v", got, sizes)
		}
	}
}
