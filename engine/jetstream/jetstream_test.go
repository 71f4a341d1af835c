package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/testnats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, url string) *Backend {
	t.Helper()
	b, err := Open(Config{URLs: []string{url}, Prefix: "t", PublishTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// produce appends recs and waits for the result.
func produce(t *testing.T, b *Backend, topic string, p int32, recs []engine.Record) (int64, error) {
	t.Helper()
	res := make(chan struct {
		base int64
		err  error
	}, 1)
	b.Produce(topic, p, recs, func(base int64, err error) {
		res <- struct {
			base int64
			err  error
		}{base, err}
	})
	select {
	case r := <-res:
		return r.base, r.err
	case <-time.After(20 * time.Second):
		t.Fatal("produce did not complete in 20s")
		return 0, nil
	}
}

func rec(id, key, value string, headers ...engine.Header) engine.Record {
	return engine.Record{ID: []byte(id), Key: []byte(key), Value: []byte(value), Headers: headers}
}

// Offsets are contiguous per partition from 0, records round-trip exactly
// (id, key, headers in order, value), times are the store's, Offsets and
// RecordTime agree, and a fetch past the end is empty.
func TestProduceFetchRoundTrip(t *testing.T) {
	srv := testnats.Start(t)
	b := open(t, srv.URL())
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders.eu", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second).UnixMilli()
	var want []engine.Record
	for i := range 25 {
		want = append(want, rec(fmt.Sprintf("id-%d", i), "k", fmt.Sprint(i), engine.Header{Key: "b", Value: []byte{0, 1, '\r', '\n'}}, engine.Header{Key: "a", Value: []byte("x")}))
	}
	base, err := produce(t, b, "orders.eu", 1, want[:10])
	if err != nil || base != 0 {
		t.Fatalf("first produce: base %d, %v; want 0", base, err)
	}
	if base, err = produce(t, b, "orders.eu", 1, want[10:]); err != nil || base != 10 {
		t.Fatalf("second produce: base %d, %v; want 10", base, err)
	}
	if _, err := produce(t, b, "orders.eu", 2, want[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := b.Fetch("orders.eu", 1, 3, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 22 {
		t.Fatalf("fetched %d records from offset 3, want 22", len(got))
	}
	for i, r := range got {
		w := want[i+3]
		if r.Offset != int64(i+3) || !bytes.Equal(r.ID, w.ID) || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) ||
			len(r.Headers) != 2 || r.Headers[0].Key != "b" || !bytes.Equal(r.Headers[0].Value, w.Headers[0].Value) || r.Headers[1].Key != "a" {
			t.Fatalf("record %d = %+v, want %+v at offset %d", i, r, w, i+3)
		}
		if r.Timestamp < before || r.Timestamp > time.Now().UnixMilli() {
			t.Fatalf("record %d: time %d is not the store time", i, r.Timestamp)
		}
	}
	small, err := b.Fetch("orders.eu", 1, 0, 1, nil)
	if err != nil || len(small) != 1 {
		t.Fatalf("fetch of 1 byte: %d records, %v; want exactly one (at least one when any is there)", len(small), err)
	}
	if end, err := b.Fetch("orders.eu", 1, 25, 1<<20, nil); err != nil || len(end) != 0 {
		t.Fatalf("fetch at the end: %d records, %v; want none", len(end), err)
	}
	if start, end, err := b.Offsets("orders.eu", 1); err != nil || start != 0 || end != 25 {
		t.Fatalf("offsets = %d, %d, %v; want 0, 25", start, end, err)
	}
	if start, end, err := b.Offsets("orders.eu", 0); err != nil || start != 0 || end != 0 {
		t.Fatalf("offsets of an empty partition = %d, %d, %v; want 0, 0", start, end, err)
	}
	if ts, err := b.RecordTime("orders.eu", 1, 7); err != nil || ts != got[4].Timestamp {
		t.Fatalf("record time = %d, %v; want %d", ts, err, got[4].Timestamp)
	}
	if off, err := b.OffsetForTime("orders.eu", 1, time.UnixMilli(before)); err != nil || off != 0 {
		t.Fatalf("offset for a time before all = %d, %v; want 0", off, err)
	}
	if off, err := b.OffsetForTime("orders.eu", 1, time.Now().Add(time.Hour)); err != nil || off != 25 {
		t.Fatalf("offset for a future time = %d, %v; want the end, 25", off, err)
	}
	if _, err := b.Fetch("nope", 0, 0, 1, nil); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("fetch of an unknown topic: %v", err)
	}
	if _, err := b.Fetch("orders.eu", 3, 0, 1, nil); !errors.Is(err, engine.ErrUnknownPartition) {
		t.Fatalf("fetch of an unknown partition: %v", err)
	}
}

// A publish retried with the same ids (an unknown outcome) is stored once.
func TestRetriedPublishStoredOnce(t *testing.T) {
	srv := testnats.Start(t)
	b := open(t, srv.URL())
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	recs := []engine.Record{rec("a", "k", "1"), rec("b", "k", "2")}
	for range 2 {
		if base, err := produce(t, b, "orders", 0, recs); err != nil || base != 0 {
			t.Fatalf("produce: base %d, %v; want 0 both times", base, err)
		}
	}
	if _, end, _ := b.Offsets("orders", 0); end != 2 {
		t.Fatalf("end %d after publishing 2 records twice, want 2", end)
	}
}

// Topics survive a restart of the sidecar (they are the broker's), a
// partition count can grow but not shrink, and a deleted topic is gone
// with its positions.
func TestTopicsLiveInTheBroker(t *testing.T) {
	srv := testnats.Start(t)
	b := open(t, srv.URL())
	spec := engine.TopicSpec{Name: "orders", Partitions: 2, RetentionAge: time.Hour}
	if err := b.EnsureTopic(spec); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitPositions("g", "orders", map[int32]engine.Position{0: {Next: 3, Done: []int64{5}}}); err != nil {
		t.Fatal(err)
	}
	b2 := open(t, srv.URL())
	if ts := b2.Topics(); len(ts) != 1 || ts[0] != spec {
		t.Fatalf("topics found by a new backend = %+v, want [%+v]", ts, spec)
	}
	pos, err := b2.LoadPositions("g", "orders")
	if err != nil || pos[0].Next != 3 || len(pos[0].Done) != 1 || pos[0].Done[0] != 5 {
		t.Fatalf("positions = %+v, %v", pos, err)
	}
	var conflict *engine.TopicConflictError
	if err := b2.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); !errors.As(err, &conflict) || conflict.Stored != 2 {
		t.Fatalf("shrinking: %v, want a TopicConflictError with 2 stored", err)
	}
	if err := b2.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 3}); err != nil {
		t.Fatalf("growing: %v", err)
	}
	if err := b2.EnsureTopic(engine.TopicSpec{Name: "orders_eu", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b2.EnsureTopic(engine.TopicSpec{Name: "orders.eu", Partitions: 1}); err == nil {
		t.Fatal("orders.eu and orders_eu map to one stream, and it was not refused")
	}
	if err := b2.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Partitions("orders"); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("deleted topic: %v", err)
	}
	if pos, err := b2.LoadPositions("g", "orders"); err != nil || len(pos) != 0 {
		t.Fatalf("positions of a deleted topic = %v, %v; want none", pos, err)
	}
}

// Watch signals when another backend (another sidecar) publishes.
func TestWatchSeesOtherPublishers(t *testing.T) {
	srv := testnats.Start(t)
	b, other := open(t, srv.URL()), open(t, srv.URL())
	for _, x := range []*Backend{b, other} {
		if err := x.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	ch := make(chan struct{}, 1)
	cancel, err := b.Watch([]string{"orders"}, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	for i := range 3 {
		select { // drain a signal that may be pending (the once-a-second one)
		case <-ch:
		default:
		}
		if _, err := produce(t, other, "orders", int32(i%2), []engine.Record{rec(fmt.Sprint(i), "k", "v")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no signal within 5s of publish %d", i)
		}
		if _, end, _ := b.Offsets("orders", int32(i%2)); end == 0 {
			t.Fatal("signalled before the message was readable")
		}
	}
}

// Records published before the broker restarts, and while it is down
// (retried by the producer with the same ids), are all there once, in
// order, after it is back.
func TestBrokerRestartLosesNothing(t *testing.T) {
	srv := testnats.Start(t)
	b := open(t, srv.URL())
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var mu sync.Mutex
	acked := map[string]bool{}
	publish := func(i int) {
		id := fmt.Sprintf("m%03d", i)
		for {
			if _, err := produce(t, b, "orders", 0, []engine.Record{rec(id, "k", id)}); err == nil {
				mu.Lock()
				acked[id] = true
				mu.Unlock()
				return
			}
			time.Sleep(50 * time.Millisecond) // sleep-ok: a producer's retry interval while the broker is down
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			publish(i)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(acked)
		mu.Unlock()
		if k >= n/3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d publishes acked in 20s", k, n/3)
		}
		time.Sleep(10 * time.Millisecond) // sleep-ok: polling a condition
	}
	srv.Stop()
	srv.Start()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("publishing did not finish within 60s of the restart")
	}
	var got []engine.Record
	for off := int64(0); ; {
		recs, err := b.Fetch("orders", 0, off, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		got = append(got, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	if len(got) != n {
		t.Fatalf("%d records stored after the restart, want %d (once each)", len(got), n)
	}
	for i, r := range got {
		if want := fmt.Sprintf("m%03d", i); string(r.ID) != want || r.Offset != int64(i) {
			t.Fatalf("record %d is %s at offset %d, want %s: order or a record lost", i, r.ID, r.Offset, want)
		}
	}
}

// The same id with other content is stored: a redrive appends a dead
// letter again under its id (marked for its group).
func TestSameIDOtherContentStored(t *testing.T) {
	srv := testnats.Start(t)
	b := open(t, srv.URL())
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := produce(t, b, "orders", 0, []engine.Record{rec("a", "k", "1")}); err != nil {
		t.Fatal(err)
	}
	if base, err := produce(t, b, "orders", 0, []engine.Record{rec("a", "k", "1", engine.Header{Key: "redrive", Value: []byte("g")})}); err != nil || base != 1 {
		t.Fatalf("redriven copy: base %d, %v; want stored at offset 1", base, err)
	}
}
