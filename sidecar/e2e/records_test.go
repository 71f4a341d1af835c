package e2e

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/internal/testkafka"
	"github.com/spoolmq/spool/internal/testnats"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// Records that a broker holds but Spool did not write are hostile input
// (docs/backends.md, "Records Spool did not write"): each affects at most
// itself. These tests write such records straight to the broker, between
// good ones, and check what the app, `spool tail` and the dead-letter
// topic see.

// binaryValue is a header value that is not UTF-8 (a binary trace context).
var binaryValue = []byte{0x0a, 0xff, 0xfe, 0x01}

// seen is what an in-process app received, by payload.
type seen struct {
	mu  sync.Mutex
	got map[string]*spool.Message
	n   map[string]int
}

func (s *seen) handler(_ context.Context, m *spool.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *m
	c.Payload = append([]byte(nil), m.Payload...)
	s.got[string(c.Payload)] = &c
	s.n[string(c.Payload)]++
	return nil
}

func (s *seen) has(payloads ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range payloads {
		if s.got[p] == nil {
			return false
		}
	}
	return true
}

// subscribeInProcess runs a Go SDK app in the test for group workers.
func subscribeInProcess(t *testing.T, n *node) *seen {
	t.Helper()
	s := &seen{got: map[string]*spool.Message{}, n: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = spool.Subscribe(ctx, n.app, "workers", nil, s.handler)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// testForeignBinaryRecords: records whose id or header value is not UTF-8,
// between good ones, are all delivered once, at their first attempt; the
// binary header arrives as <name>-bin in base64, the binary id as b64:<id
// in base64url>; nothing is dead-lettered; `spool tail` (Admin.Tail) shows
// them.
func testForeignBinaryRecords(t *testing.T, b backend, write func(t *testing.T, payloads []string, binaryHeaderAt, binaryIDAt int)) {
	n := b.startNode(t, config("10s", "key"))
	var payloads []string
	for i := range 10 {
		payloads = append(payloads, fmt.Sprintf("m%d", i))
	}
	write(t, payloads, 4, 6)

	s := subscribeInProcess(t, n)
	eventually(t, 30*time.Second, "every record delivered", func() bool { return s.has(payloads...) })
	s.mu.Lock()
	for _, p := range payloads {
		if m := s.got[p]; m.Attempt != 1 || s.n[p] != 1 {
			t.Errorf("%s: delivered %d times, last at attempt %d; want once at attempt 1 (no attempt charged for another record)", p, s.n[p], m.Attempt)
		}
	}
	if got, want := s.got["m4"].Headers["trace-bin-bin"], base64.StdEncoding.EncodeToString(binaryValue); got != want {
		t.Errorf("binary header: headers %q; want trace-bin-bin = %q", s.got["m4"].Headers, want)
	}
	if got := s.got["m4"].Headers["a"]; got != "x" {
		t.Errorf("the binary record's text header a = %q, want x", got)
	}
	if got, want := s.got["m6"].ID, "b64:"+base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xfe}); got != want {
		t.Errorf("binary id delivered as %q, want %q", got, want)
	}
	s.mu.Unlock()

	a := n.adminClient()
	peek, err := a.PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "workers", Topic: "orders"})
	if err != nil || len(peek.GetEntries()) != 0 {
		t.Fatalf("dead letters %v (err %v); want none", peek.GetEntries(), err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := a.Tail(ctx, &spoolv1.TailRequest{Topic: "orders", Partitions: []int32{0}, From: &spoolv1.TailRequest_Earliest{Earliest: true}})
	if err != nil {
		t.Fatal(err)
	}
	tailed := map[string]*spoolv1.TailRecord{}
	for len(tailed) < len(payloads) {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("tail after %d records: %v", len(tailed), err)
		}
		if r := resp.GetRecord(); r != nil {
			tailed[string(r.GetPayload())] = r
		}
	}
	if got := tailed["m4"].GetHeaders()["trace-bin-bin"]; got != base64.StdEncoding.EncodeToString(binaryValue) {
		t.Errorf("tail: binary header shown as %q", tailed["m4"].GetHeaders())
	}
	if got := tailed["m6"].GetId(); got != s.got["m6"].ID {
		t.Errorf("tail: binary id shown as %q, the app saw %q", got, s.got["m6"].ID)
	}
}

// writeKafkaRecords produces the records to partition 0 of the test's
// Kafka topic orders as another Kafka producer would.
func writeKafkaRecords(brk *testkafka.Broker) func(t *testing.T, payloads []string, binaryHeaderAt, binaryIDAt int) {
	return func(t *testing.T, payloads []string, binaryHeaderAt, binaryIDAt int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brk.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var recs []*kgo.Record
		for i, p := range payloads {
			r := &kgo.Record{Topic: kafkaPrefix(t) + "orders", Partition: 0, Key: []byte("k"), Value: []byte(p)}
			switch i {
			case binaryHeaderAt:
				r.Headers = []kgo.RecordHeader{{Key: "trace-bin", Value: binaryValue}, {Key: "a", Value: []byte("x")}}
			case binaryIDAt:
				r.Headers = []kgo.RecordHeader{{Key: "spool-id", Value: []byte{0xff, 0xfe}}}
			}
			recs = append(recs, r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// jetStreamOn is the jetstream backend on a nats-server the test holds.
func jetStreamOn(srv *testnats.Server) backend {
	return backend{name: "jetstream", storage: func(*testing.T) string {
		return fmt.Sprintf("storage:\n  backend: jetstream\n  jetstream:\n    urls: [%q]\n", srv.URL())
	}}
}

// spoolPayload is a record in Spool's JetStream payload format
// (engine/jetstream/encode.go), as any NATS client can write it.
func spoolPayload(id []byte, value string, headers ...[2][]byte) []byte {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	b = binary.AppendUvarint(b, 1)
	b = append(b, 'k')
	b = binary.AppendUvarint(b, uint64(len(headers)))
	for _, h := range headers {
		b = binary.AppendUvarint(b, uint64(len(h[0])))
		b = append(b, h[0]...)
		b = binary.AppendUvarint(b, uint64(len(h[1])))
		b = append(b, h[1]...)
	}
	return append(b, value...)
}

// publishRaw publishes payloads on partition 0 of topic orders (subject
// spool.orders.0) with a plain NATS connection, each stored before the next.
func publishRaw(t *testing.T, srv *testnats.Server, payloads ...[]byte) {
	t.Helper()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, p := range payloads {
		if _, err := nc.Request("spool.orders.0", p, 10*time.Second); err != nil { // the stream's ack
			t.Fatal(err)
		}
	}
}

func writeJetStreamRecords(srv *testnats.Server) func(t *testing.T, payloads []string, binaryHeaderAt, binaryIDAt int) {
	return func(t *testing.T, payloads []string, binaryHeaderAt, binaryIDAt int) {
		var raw [][]byte
		for i, p := range payloads {
			switch i {
			case binaryHeaderAt:
				raw = append(raw, spoolPayload([]byte("id-"+p), p, [2][]byte{[]byte("trace-bin"), binaryValue}, [2][]byte{[]byte("a"), []byte("x")}))
			case binaryIDAt:
				raw = append(raw, spoolPayload([]byte{0xff, 0xfe}, p))
			default:
				raw = append(raw, spoolPayload([]byte("id-"+p), p))
			}
		}
		publishRaw(t, srv, raw...)
	}
}

// A message on a partition's subject that is no Spool record (a plain NATS
// publish) is dead-lettered with its raw bytes and its own reason; the
// records after it are delivered, at their first attempt.
func testForeignNATSMessage(t *testing.T, srv *testnats.Server) {
	n := jetStreamOn(srv).startNode(t, config("10s", "key"))
	good := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
	var raw [][]byte
	for i, p := range good {
		if i == 3 {
			raw = append(raw, []byte("not a spool record"))
		}
		raw = append(raw, spoolPayload([]byte("id-"+p), p))
	}
	publishRaw(t, srv, raw...)
	s := subscribeInProcess(t, n)
	eventually(t, 30*time.Second, "every Spool record delivered", func() bool { return s.has(good...) })
	s.mu.Lock()
	for _, p := range good {
		if s.n[p] != 1 || s.got[p].Attempt != 1 {
			t.Errorf("%s: delivered %d times, at attempt %d; want once at attempt 1", p, s.n[p], s.got[p].Attempt)
		}
	}
	if s.n["not a spool record"] != 0 {
		t.Errorf("the foreign message reached the app")
	}
	s.mu.Unlock()
	a := n.adminClient()
	var entries []*spoolv1.DeadLetter
	eventually(t, 30*time.Second, "the foreign message dead-lettered", func() bool {
		resp, err := a.PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "workers", Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		entries = resp.GetEntries()
		return len(entries) > 0
	})
	e := entries[0]
	if len(entries) != 1 || string(e.GetMessage().GetPayload()) != "not a spool record" || e.GetMessage().GetOffset() != 3 ||
		!strings.HasPrefix(e.GetReason(), "undecodable_record") || e.GetMessage().GetAttempt() > 1 {
		t.Fatalf("dead letters %v; want the foreign message at offset 3 with its raw bytes, reason undecodable_record, no attempt charged", entries)
	}
	series := `spool_dead_lettered_total{group="workers",reason="undecodable_record",topic="orders"}`
	eventually(t, 10*time.Second, series+" = 1", func() bool { return metricValue(t, n, series) == 1 })
	// One warning for the partition, and no error: the foreign message once
	// made the partition's reads fail every 500 ms, an ERROR line each
	// (941 in 8 minutes). The reads go on meanwhile (the delivery loop
	// polls), so a retry loop would have logged by now.
	eventually(t, 10*time.Second, "spoold logged the partition's reads past the foreign message", func() bool {
		return metricValue(t, n, `spool_deliveries_total{group="workers",topic="orders"}`) >= float64(len(good))
	})
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var warns, errs []string
	for _, line := range strings.Split(string(b), "\n") {
		forPartition := strings.Contains(line, "spool.orders.0") || strings.Contains(line, "topic=orders") && strings.Contains(line, "partition=0")
		switch {
		case strings.Contains(line, "level=ERROR"):
			errs = append(errs, line)
		case strings.Contains(line, "level=WARN") && forPartition:
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "no Spool record") || len(errs) != 0 {
		t.Errorf("spoold logged %d WARN lines for the partition and %d ERROR lines; want one warning that it is no Spool record, and no error:\n%s",
			len(warns), len(errs), strings.Join(append(warns, errs...), "\n"))
	}
}
