package publish

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// holding is an engine that keeps every append's completion until the
// test releases it: the requests stay in flight.
type holding struct {
	mu      sync.Mutex
	pending []func(int64, error)
}

func (*holding) Partitions(string) (int32, error) { return 1, nil }
func (h *holding) ProduceWith(_ string, _ int32, _ []engine.Record, _ engine.ProduceOptions, done func(int64, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending = append(h.pending, done)
}

func (h *holding) appends() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}

// completeFirst completes the oldest append held.
func (h *holding) completeFirst() {
	h.mu.Lock()
	done := h.pending[0]
	h.pending = h.pending[1:]
	h.mu.Unlock()
	done(0, nil)
}

// Publish requests in flight hold at most publish.memory_bytes: with room
// for two 1 KiB requests, the third of a stream is not read (nor
// appended) until one of the first two is answered, and a unary publish
// that cannot get room before its deadline is refused having stored
// nothing. The metrics say what is held and how often a request waited.
func TestPublishMemoryBudget(t *testing.T) {
	eng := &holding{}
	m := metrics.New()
	s, err := New(Config{Engine: eng, Metrics: m, MemoryBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := client(t, s).PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kib := &spoolv1.PublishMessage{Payload: make([]byte, 1<<10)}
	for seq := range uint64(3) {
		if err := stream.Send(&spoolv1.PublishStreamRequest{Sequence: seq + 1, Topic: "orders", Messages: []*spoolv1.PublishMessage{kib}}); err != nil {
			t.Fatal(err)
		}
	}
	awaitTrue(t, "two requests appended", func() bool { return eng.appends() == 2 })
	awaitTrue(t, "the third waiting for room", func() bool { return testutil.ToFloat64(m.PublishMemoryWaits) == 1 })
	if got := testutil.ToFloat64(m.PublishMemory); got != 2<<10 {
		t.Fatalf("spool_publish_memory_bytes %v, want 2048", got)
	}
	if eng.appends() != 2 {
		t.Fatalf("%d appends with room for two requests", eng.appends())
	}
	// A unary publish meanwhile finds no room before its deadline.
	uctx, ucancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = client(t, s).Publish(uctx, &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{kib}})
	ucancel()
	if err == nil || eng.appends() != 2 {
		t.Fatalf("a unary publish with the budget full: %v, %d appends; want an error and nothing appended", err, eng.appends())
	}
	// The server gives up on its own deadline, which may come after the
	// client's: room made before that would still let the request in.
	awaitTrue(t, "the unary publish refused by the server", func() bool { return testutil.ToFloat64(m.PublishMemoryRefused) == 1 })
	eng.completeFirst()
	if r, err := stream.Recv(); err != nil || r.GetSequence() != 1 {
		t.Fatalf("first answer %v, %v", r, err)
	}
	awaitTrue(t, "the third request appended once the first was answered", func() bool { return eng.appends() == 2 })
	eng.completeFirst()
	eng.completeFirst()
	for want := uint64(2); want <= 3; want++ {
		if r, err := stream.Recv(); err != nil || r.GetSequence() != want {
			t.Fatalf("answer %v, %v; want sequence %d", r, err, want)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	awaitTrue(t, "nothing held once every request is answered", func() bool { return testutil.ToFloat64(m.PublishMemory) == 0 })
	if got := testutil.ToFloat64(m.PublishMemoryLimit); got != 2<<10 {
		t.Fatalf("spool_publish_memory_limit_bytes %v", got)
	}
}

func awaitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // sleep-ok: polling a condition
	}
}

// Once the engine has taken a request's records (the log encodes them into
// its own buffer as it takes them), nothing of this package keeps the
// decoded payloads alive while the append is in flight: with large
// messages and a slow disk they would otherwise be held twice, decoded
// and encoded, until the acknowledgement (docs/architecture.md, "Memory").
func TestSubmitDropsPayloadsTheEngineTook(t *testing.T) {
	eng := &holding{}
	s, err := New(Config{Engine: eng, Metrics: metrics.New()})
	if err != nil {
		t.Fatal(err)
	}
	freed := make(chan struct{})
	answered := make(chan []*spoolv1.PublishResult, 1)
	func() { // the test keeps no reference to the request either
		payload := make([]byte, 64<<10)
		runtime.AddCleanup(&payload[0], func(ch chan struct{}) { close(ch) }, freed)
		msgs := []*spoolv1.PublishMessage{{Id: "m1", Payload: payload}}
		s.Submit(context.Background(), "orders", spoolv1.Acks_ACKS_ALL, msgs, func(r []*spoolv1.PublishResult, err error) {
			if err != nil {
				t.Error(err)
			}
			answered <- r
		})
	}()
	if eng.appends() != 1 {
		t.Fatalf("%d appends, want 1", eng.appends())
	}
	awaitTrue(t, "the payload freed while its append is in flight", func() bool {
		runtime.GC()
		select {
		case <-freed:
			return true
		default:
			return false
		}
	})
	eng.completeFirst()
	if r := <-answered; len(r) != 1 || r[0].GetId() != "m1" {
		t.Fatalf("results %v, want one for m1", r)
	}
}

// A request whose caller has gone gets no room, even when there is some
// (semaphore.Acquire may succeed on a done context): it must not be
// appended after its caller was told it failed.
func TestMemoryRefusesAGoneCaller(t *testing.T) {
	m := metrics.New()
	mem := newMemory(2<<10, m)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := mem.acquire(ctx, 1<<10); err == nil {
		t.Fatalf("acquire on a done context took %d bytes", n)
	}
	if got := testutil.ToFloat64(m.PublishMemory); got != 0 || testutil.ToFloat64(m.PublishMemoryRefused) != 1 {
		t.Fatalf("held %v bytes after a refusal, %v refusals counted", got, testutil.ToFloat64(m.PublishMemoryRefused))
	}
}
