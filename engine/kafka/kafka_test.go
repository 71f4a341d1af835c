package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/engine"
)

// Offsets are contiguous per partition from 0, records round-trip exactly
// (id, key, headers in order, value), times are the broker's, Offsets,
// RecordTime and OffsetForTime agree, a fetch past the end is empty, and
// a record another Kafka producer wrote gets an id of its coordinates.
func TestProduceFetchRoundTrip(t *testing.T) {
	b := open(t)
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders.eu", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second).UnixMilli()
	var want []engine.Record
	for i := range 25 {
		want = append(want, rec(fmt.Sprintf("id-%d", i), "k", fmt.Sprint(i), engine.Header{Key: "b", Value: []byte{0, 1, '\r', '\n'}}, engine.Header{Key: "a", Value: []byte("x")}, engine.Header{Key: idHeader, Value: []byte("app's own")}))
	}
	base, err := produce(t, b, "orders.eu", 1, want[:10])
	if err != nil || base != 0 {
		t.Fatalf("first produce: base %d, %v; want 0", base, err)
	}
	if base, err = produce(t, b, "orders.eu", 1, want[10:]); err != nil || base != 10 {
		t.Fatalf("second produce: base %d, %v; want 10", base, err)
	}
	if _, err := produce(t, b, "orders.eu", 2, []engine.Record{{ID: []byte("no-key"), Value: []byte("v")}}); err != nil {
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
		if r.Offset != int64(i+3) || !bytes.Equal(r.ID, w.ID) || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || len(r.Headers) != 3 {
			t.Fatalf("record %d = %+v, want %+v at offset %d", i, r, w, i+3)
		}
		for j, h := range r.Headers {
			if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d = %s:%q, want %s:%q", i, j, h.Key, h.Value, w.Headers[j].Key, w.Headers[j].Value)
			}
		}
		if r.Timestamp < before || r.Timestamp > time.Now().UnixMilli() {
			t.Fatalf("record %d: time %d is not the append time", i, r.Timestamp)
		}
	}
	if nokey, err := b.Fetch("orders.eu", 2, 0, 1<<20, nil); err != nil || len(nokey) != 1 || len(nokey[0].Key) != 0 || string(nokey[0].ID) != "no-key" {
		t.Fatalf("record without a key: %+v, %v", nokey, err)
	}
	small, err := b.Fetch("orders.eu", 1, 0, 1, nil)
	if err != nil || len(small) == 0 || small[0].Offset != 0 {
		t.Fatalf("fetch of 1 byte: %d records, %v; want at least one, from offset 0", len(small), err)
	}
	if end, err := b.Fetch("orders.eu", 1, 25, 1<<20, nil); err != nil || len(end) != 0 {
		t.Fatalf("fetch at the end: %d records, %v; want none", len(end), err)
	}
	var oor *engine.OffsetOutOfRangeError
	if _, err := b.Fetch("orders.eu", 1, 40, 1<<20, nil); !errors.As(err, &oor) {
		t.Fatalf("fetch past the end: %v, want an OffsetOutOfRangeError", err)
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

	// A record from a plain Kafka producer: no id header.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := &kgo.Record{Topic: prefix(t) + "orders.eu", Partition: 0, Key: []byte("k"), Value: []byte("foreign"), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	foreign, err := b.Fetch("orders.eu", 0, 0, 1<<20, nil)
	if err != nil || len(foreign) != 1 || string(foreign[0].ID) != "kafka:0:0" || string(foreign[0].Value) != "foreign" || len(foreign[0].Headers) != 1 {
		t.Fatalf("a foreign record: %+v, %v; want id kafka:0:0 and its header", foreign, err)
	}

	// Retention deleted the start: below it is out of range.
	adm := kadm.NewClient(cl)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: prefix(t) + "orders.eu", Partition: 1, At: 5})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	if _, err := b.Fetch("orders.eu", 1, 2, 1<<20, nil); !errors.As(err, &oor) || oor.Start != 5 || oor.End != 25 {
		t.Fatalf("fetch below the log start: %v, want out of range [5, 25]", err)
	}
	if start, _, err := b.Offsets("orders.eu", 1); err != nil || start != 5 {
		t.Fatalf("log start after deleting records = %d, %v; want 5", start, err)
	}
}

// Topics are checked at start: a missing one is an error that says what
// to do when the backend may not create it, created when it may, grown
// when it may, never shrunk; and a new backend finds the topics under its
// prefix.
func TestTopicsCheckedAndCreated(t *testing.T) {
	strict := open(t, func(c *Config) { c.CreateTopics = false })
	err := strict.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4})
	if err == nil || !strings.Contains(err.Error(), "does not exist and storage.kafka.create_topics is false") || !strings.Contains(err.Error(), "kafka-topics --create") {
		t.Fatalf("a missing topic without create_topics: %v", err)
	}
	b := open(t)
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2, RetentionAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := strict.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatalf("an existing topic without create_topics: %v", err)
	}
	if err := strict.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err == nil || !strings.Contains(err.Error(), "has 2 partitions, the config declares 4") {
		t.Fatalf("growing without create_topics: %v", err)
	}
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatalf("growing with create_topics: %v", err)
	}
	var conflict *engine.TopicConflictError
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 3}); !errors.As(err, &conflict) || conflict.Stored != 4 {
		t.Fatalf("shrinking: %v, want a TopicConflictError with 4 stored", err)
	}
	if err := b.EnsureTopic(engine.TopicSpec{Name: "__x", Partitions: 1}); err == nil {
		t.Fatal("a reserved name was accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfgs, err := b.admin.DescribeTopicConfigs(ctx, prefix(t)+"orders")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfgs.On(prefix(t)+"orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, kv := range c.Configs {
		if kv.Value != nil {
			seen[kv.Key] = *kv.Value
		}
	}
	if seen["retention.ms"] != "3600000" || seen["message.timestamp.type"] != "LogAppendTime" {
		t.Fatalf("created topic's configs: retention.ms %q, message.timestamp.type %q", seen["retention.ms"], seen["message.timestamp.type"])
	}
	again := open(t)
	if n, err := again.Partitions("orders"); err != nil || n != 4 {
		t.Fatalf("a new backend finds orders with %d partitions, %v; want 4", n, err)
	}
	if err := strict.DeleteTopic("orders"); !errors.Is(err, engine.ErrDeleteUnsupported) {
		t.Fatalf("delete without create_topics: %v", err)
	}
	if err := b.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Partitions("orders"); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("deleted topic: %v", err)
	}
}

// Watch signals when another producer's record moves the high watermark
// (the poll), and when this backend's own produce completes.
func TestWatch(t *testing.T) {
	b := open(t)
	other := open(t)
	for _, x := range []*Backend{b, other} {
		if err := x.EnsureTopic(engine.TopicSpec{Name: "w", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	ch := make(chan struct{}, 1)
	cancel, err := b.Watch([]string{"w"}, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if _, err := b.Watch([]string{"nope"}, ch); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("watch of an unknown topic: %v", err)
	}
	drain := func() {
		select {
		case <-ch:
		default:
		}
	}
	for i, x := range []*Backend{other, b} {
		time.Sleep(300 * time.Millisecond) // sleep-ok: let a poll see the ends before the produce
		drain()
		if _, err := produce(t, x, "w", 1, []engine.Record{rec(fmt.Sprint(i), "k", "v")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("produce %d: no signal within 5s", i)
		}
	}
}

// TestFetchBoundsDecodedBytes: Kafka counts a fetch's bytes as stored
// (compressed); Fetch bounds the records it returns as the caller holds
// them, so well-compressed messages do not come back many times over what
// delivery's memory budget granted.
func TestFetchBoundsDecodedBytes(t *testing.T) {
	b := open(t)
	if err := b.EnsureTopic(engine.TopicSpec{Name: "zeros", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const n, size = 2000, 1024
	for i := 0; i < n; i += 100 {
		recs := make([]engine.Record, 100)
		for j := range recs {
			recs[j] = engine.Record{ID: []byte(fmt.Sprintf("id-%d", i+j)), Value: make([]byte, size)}
		}
		if _, err := produce(t, b, "zeros", 0, recs); err != nil {
			t.Fatal(err)
		}
	}
	const maxBytes = 64 << 10
	next := int64(0)
	for calls := 0; next < n; calls++ {
		got, err := b.Fetch("zeros", 0, next, maxBytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[0].Offset != next {
			t.Fatalf("fetch from %d returned %d records starting at %v", next, len(got), got)
		}
		held := 0
		for i, r := range got {
			if r.Offset != next+int64(i) {
				t.Fatalf("record %d has offset %d, want %d", i, r.Offset, next+int64(i))
			}
			held += len(r.Key) + len(r.Value) + len(r.ID)
		}
		if held > maxBytes+size+64 {
			t.Fatalf("fetch from %d of at most %d bytes returned %d records, %d bytes decoded", next, maxBytes, len(got), held)
		}
		next += int64(len(got))
		if calls > 4*n*size/maxBytes {
			t.Fatalf("%d fetches for %d records of %d bytes, %d per fetch: reads far smaller than asked", calls, n, size, maxBytes)
		}
	}
}

// TestConcurrentFetches: partitions read at the same time (delivery's
// readers, delivery.reads_in_flight) each get their own partition's
// records, from their own offset.
func TestConcurrentFetches(t *testing.T) {
	b := open(t)
	const parts, n = 8, 300
	if err := b.EnsureTopic(engine.TopicSpec{Name: "many", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		recs := make([]engine.Record, n)
		for i := range recs {
			recs[i] = engine.Record{ID: []byte(fmt.Sprintf("p%d-%d", p, i)), Value: []byte(fmt.Sprintf("v%d-%d", p, i))}
		}
		if _, err := produce(t, b, "many", p, recs); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for p := range int32(parts) {
		wg.Go(func() {
			for next := int64(p); next < n; { // each from its own offset on
				got, err := b.Fetch("many", p, next, 4<<10, nil)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					errs <- fmt.Errorf("partition %d: nothing from %d", p, next)
					return
				}
				for _, r := range got {
					if want := fmt.Sprintf("p%d-%d", p, next); r.Offset != next || string(r.ID) != want {
						errs <- fmt.Errorf("partition %d: record %s at offset %d, want %s at %d", p, r.ID, r.Offset, want, next)
						return
					}
					next++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
