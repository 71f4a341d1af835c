package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spoolmq/spool/engine"
)

// Positions round-trip through Kafka committed offsets: Next is the
// committed offset Kafka's tools show, the finished offsets above it come
// back from the metadata, marks under <topic>~<mark> are a group of their
// own, and another consumer's metadata reads as no finished offsets.
func TestPositionsRoundTrip(t *testing.T) {
	b := open(t)
	for _, name := range []string{"orders", "orders.dlq.g"} {
		if err := b.EnsureTopic(engine.TopicSpec{Name: name, Partitions: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := b.LoadPositions("workers", "orders"); err != nil || len(got) != 0 {
		t.Fatalf("positions of a group that never committed: %v, %v; want none", got, err)
	}
	want := map[int32]engine.Position{0: {Next: 5, Done: []int64{7, 8, 9, 12}}, 2: {Next: 40}}
	if err := b.CommitPositions("workers", "orders", want); err != nil {
		t.Fatal(err)
	}
	got, err := b.LoadPositions("workers", "orders")
	if err != nil || !equal(got, want) {
		t.Fatalf("loaded %v, %v; want %v", got, err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kafkaView, err := b.admin.FetchOffsets(ctx, prefix(t)+"workers")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := kafkaView.Lookup(prefix(t)+"orders", 0); !ok || o.At != 5 || o.Metadata != "spool1:2.3,2.1" {
		t.Fatalf("Kafka's view of partition 0: %+v; want offset 5, metadata spool1:2.3,2.1", o)
	}

	marks := map[int32]engine.Position{1: {Next: 3}}
	if err := b.CommitPositions("g", "orders.dlq.g~purged", marks); err != nil {
		t.Fatal(err)
	}
	if got, err := b.LoadPositions("g", "orders.dlq.g~purged"); err != nil || !equal(got, marks) {
		t.Fatalf("purge marks: %v, %v; want %v", got, err, marks)
	}
	if got, err := b.LoadPositions("g", "orders.dlq.g"); err != nil || len(got) != 0 {
		t.Fatalf("the group's own positions on the dead-letter topic: %v, %v; want none (marks are apart)", got, err)
	}

	foreign := kadm.Offsets{}
	foreign.Add(kadm.Offset{Topic: prefix(t) + "orders", Partition: 1, At: 9, LeaderEpoch: -1, Metadata: "a Kafka consumer's"})
	if resp, err := b.admin.CommitOffsets(ctx, prefix(t)+"legacy", foreign); err != nil || resp.Error() != nil {
		t.Fatalf("commit as a Kafka consumer: %v %v", err, resp.Error())
	}
	if got, err := b.LoadPositions("legacy", "orders"); err != nil || !equal(got, map[int32]engine.Position{1: {Next: 9}}) {
		t.Fatalf("a Kafka consumer's commit: %v, %v; want next 9, nothing finished above", got, err)
	}
}

// Finished offsets that do not fit in the metadata are left out, the
// lowest kept, and counted: the position stays correct (what is left out
// is delivered again), the commit is not refused.
func TestPositionsMetadataOverflow(t *testing.T) {
	var truncated atomic.Int64
	b := open(t, func(c *Config) {
		c.MetadataMaxBytes = 64
		c.Hooks.PositionsTruncated = func(group, topic string, p int32, dropped int) {
			if group == "workers" && topic == "orders" && p == 0 {
				truncated.Add(int64(dropped))
			}
		}
	})
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var done []int64
	for o := int64(1001); o < 1200; o += 2 {
		done = append(done, o) // runs of one: 100 of them cannot fit in 64 bytes
	}
	if err := b.CommitPositions("workers", "orders", map[int32]engine.Position{0: {Next: 1000, Done: done}}); err != nil {
		t.Fatal(err)
	}
	got, err := b.LoadPositions("workers", "orders")
	if err != nil {
		t.Fatal(err)
	}
	kept := got[0].Done
	if got[0].Next != 1000 || len(kept) == 0 || !slices.Equal(kept, done[:len(kept)]) || len(kept)+int(truncated.Load()) != len(done) {
		t.Fatalf("loaded next %d with %d finished offsets (%v), %d counted as dropped; want next 1000, a prefix of the %d, the rest counted",
			got[0].Next, len(kept), kept, truncated.Load(), len(done))
	}
}

func equal(a, b map[int32]engine.Position) bool {
	if len(a) != len(b) {
		return false
	}
	for p, pa := range a {
		if pb, ok := b[p]; !ok || !pa.Equal(pb) {
			return false
		}
	}
	return true
}

// encodeDone and decodeDone round-trip any ascending set above next,
// within the byte limit; hostile metadata gives an error, never a panic
// nor an unbounded allocation.
func TestDoneEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		next := r.Int64N(1 << 40)
		var done []int64
		o := next
		for range r.IntN(50) {
			o += 1 + r.Int64N(3)
			done = append(done, o)
		}
		limit := 8 + r.IntN(200)
		meta, dropped := encodeDone(next, done, limit)
		if len(meta) > limit {
			t.Fatalf("metadata of %d bytes over the limit %d", len(meta), limit)
		}
		back, err := decodeDone(next, meta)
		if err != nil || !slices.Equal(back, done[:len(done)-dropped]) {
			t.Fatalf("next %d done %v limit %d: meta %q decoded to %v, %v (dropped %d)", next, done, limit, meta, back, err, dropped)
		}
	}
	for _, bad := range []string{"spool1:", "spool1:0.1", "spool1:1.0", "spool1:x", "spool1:1.1,", "spool1:1.zzzzzzzzzz", "spool1:-1.1", "spool1:1.1;2.2", "spool1:" + strings.Repeat("1.1,", 10) + "zzzzzzzzzzzzz.1"} {
		if done, err := decodeDone(5, bad); err == nil {
			t.Errorf("%q decoded to %v without an error", bad, done)
		}
	}
}

// A produce whose response is lost is retried by the client and stored
// once (the idempotent producer: the broker drops the batch it has): the
// offsets stay contiguous and the call completes with the first one.
func TestRetriedProduceStoredOnce(t *testing.T) {
	var dropped atomic.Bool
	b := open(t, func(c *Config) {
		c.dial = func(ctx context.Context, network, host string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, host)
			if err != nil {
				return nil, err
			}
			return &dropProduceResponse{Conn: conn, dropped: &dropped, produces: map[int32]bool{}}, nil
		}
	})
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	recs := []engine.Record{rec("a", "k", "1"), rec("b", "k", "2"), rec("c", "k", "3")}
	if base, err := produce(t, b, "orders", 0, recs); err != nil || base != 0 {
		t.Fatalf("produce whose response was lost: base %d, %v; want 0, nil", base, err)
	}
	if !dropped.Load() {
		t.Fatal("no produce response was dropped: the fault was not injected")
	}
	if base, err := produce(t, b, "orders", 0, recs[:1]); err != nil || base != 3 {
		t.Fatalf("next produce: base %d, %v; want 3", base, err)
	}
	got, err := b.Fetch("orders", 0, 0, 1<<20, nil)
	if err != nil || len(got) != 4 {
		t.Fatalf("fetched %d records, %v; want 4 (3, stored once, then 1)", len(got), err)
	}
	for i, id := range []string{"a", "b", "c", "a"} {
		if string(got[i].ID) != id || got[i].Offset != int64(i) {
			t.Fatalf("record %d: id %s offset %d; want %s at %d", i, got[i].ID, got[i].Offset, id, i)
		}
	}
}

// dropProduceResponse is a connection to a broker that loses the first
// produce response (of all its connections): it closes the connection
// instead of passing it on, after the broker has stored the batch.
type dropProduceResponse struct {
	net.Conn
	dropped *atomic.Bool

	mu       sync.Mutex
	produces map[int32]bool // correlation ids of produce requests
	frame    []byte         // the rest of the response being read
}

// Write notes produce requests: each Write is one request (size, api
// key, version, correlation id, ...).
func (c *dropProduceResponse) Write(p []byte) (int, error) {
	if len(p) >= 12 && binary.BigEndian.Uint16(p[4:6]) == 0 {
		c.mu.Lock()
		c.produces[int32(binary.BigEndian.Uint32(p[8:12]))] = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// Read reads whole responses (size, correlation id, ...) and hands them
// out, except the first produce response.
func (c *dropProduceResponse) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.frame) == 0 {
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(c.Conn, hdr); err != nil {
			return 0, err
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
		if _, err := io.ReadFull(c.Conn, body); err != nil {
			return 0, err
		}
		if c.produces[int32(binary.BigEndian.Uint32(hdr[4:8]))] && c.dropped.CompareAndSwap(false, true) {
			c.Conn.Close()
			return 0, errors.New("test: the produce response was lost")
		}
		c.frame = append(hdr, body...)
	}
	n := copy(p, c.frame)
	c.frame = c.frame[n:]
	return n, nil
}
