package publish

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node opens a real engine in a temp dir with topic "orders" (4 partitions)
// and runs its appender until the test ends.
func node(t *testing.T) *embedded.Node {
	t.Helper()
	n, err := embedded.Open(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

func server(t *testing.T, eng Engine, l Limits) (*Server, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	s, err := New(Config{Engine: eng, Limits: l, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

func publish(t *testing.T, s *Server, topic string, msgs ...*spoolv1.PublishMessage) (*spoolv1.PublishResponse, *status.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Publish(ctx, &spoolv1.PublishRequest{Topic: topic, Messages: msgs})
	return resp, status.Convert(err)
}

func reasonOfStatus(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// rejected returns spool_publish_rejected_total by topic and reason.
func rejected(t *testing.T, m *metrics.Metrics) map[[2]string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]float64{}
	for _, f := range fams {
		if f.GetName() != "spool_publish_rejected_total" {
			continue
		}
		for _, mm := range f.GetMetric() {
			out[[2]string{label(mm, "topic"), label(mm, "reason")}] += mm.GetCounter().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func ends(t *testing.T, n *embedded.Node) []int64 {
	t.Helper()
	var out []int64
	for p := range int32(4) {
		_, end, err := n.Offsets("orders", p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, end)
	}
	return out
}

var small = Limits{MaxMessageBytes: 4096, MaxKeyBytes: 64, MaxIDBytes: 40, MaxHeaders: 3, MaxHeaderBytes: 100, MaxBatchMessages: 5}

// Each limit refuses with INVALID_ARGUMENT and the reason naming it, in the
// status and in the metric, and nothing of the request is written: a
// batch whose last message breaks a limit leaves every partition as it was.
func TestLimitsRefuseTheWholeBatch(t *testing.T) {
	n := node(t)
	s, m := server(t, n, small)
	ok := func(key string) *spoolv1.PublishMessage {
		return &spoolv1.PublishMessage{Key: []byte(key), Payload: []byte("payload")}
	}
	many := func(k int) []*spoolv1.PublishMessage {
		var out []*spoolv1.PublishMessage
		for i := range k {
			out = append(out, ok(fmt.Sprint("k", i)))
		}
		return out
	}
	bigHeaders := map[string]string{"a": strings.Repeat("x", 60), "b": strings.Repeat("y", 60)}
	cases := []struct {
		name   string
		msgs   []*spoolv1.PublishMessage
		reason string
		limit  string
	}{
		{"message", append(many(3), &spoolv1.PublishMessage{Payload: make([]byte, 4097)}), "MESSAGE_TOO_LARGE", "max_message_bytes"},
		{"message with key and headers", append(many(3), &spoolv1.PublishMessage{Key: make([]byte, 60), Payload: make([]byte, 4030), Headers: map[string]string{"h": "vvvvvvvvvv"}}), "MESSAGE_TOO_LARGE", "max_message_bytes"},
		{"key", append(many(3), &spoolv1.PublishMessage{Key: make([]byte, 65)}), "KEY_TOO_LARGE", "max_key_bytes"},
		{"id", append(many(3), &spoolv1.PublishMessage{Id: strings.Repeat("i", 41)}), "ID_TOO_LARGE", "max_id_bytes"},
		{"header count", append(many(3), &spoolv1.PublishMessage{Headers: map[string]string{"a": "", "b": "", "c": "", "d": ""}}), "TOO_MANY_HEADERS", "max_headers"},
		{"header bytes", append(many(3), &spoolv1.PublishMessage{Headers: bigHeaders}), "HEADERS_TOO_LARGE", "max_header_bytes"},
		{"batch", many(6), "BATCH_TOO_LARGE", "max_batch_messages"},
		{"reserved header", append(many(3), &spoolv1.PublishMessage{Headers: map[string]string{"Spool-DLQ-Reason": "x"}}), "RESERVED_HEADER", ""},
		{"empty header name", append(many(3), &spoolv1.PublishMessage{Headers: map[string]string{"": "x"}}), "INVALID_HEADER_NAME", ""},
		{"partition", append(many(3), &spoolv1.PublishMessage{Partition: ptr(int32(4))}), "BAD_PARTITION", ""},
	}
	before := ends(t, n)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			was := rejected(t, m)[[2]string{"orders", c.reason}]
			_, st := publish(t, s, "orders", c.msgs...)
			if st.Code() != codes.InvalidArgument || reasonOfStatus(st) != c.reason {
				t.Fatalf("got %s %q (%s), want INVALID_ARGUMENT %s", st.Code(), reasonOfStatus(st), st.Message(), c.reason)
			}
			if c.limit != "" && !strings.Contains(st.Message(), c.limit) {
				t.Fatalf("message %q does not name the limit %s", st.Message(), c.limit)
			}
			if got := rejected(t, m)[[2]string{"orders", c.reason}] - was; got != float64(len(c.msgs)) {
				t.Fatalf("spool_publish_rejected_total{orders,%s} grew by %v, want %d", c.reason, got, len(c.msgs))
			}
		})
	}
	if after := ends(t, n); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a refused batch wrote something: partition ends %v, were %v", after, before)
	}
	// At the limits exactly, everything is accepted.
	at := &spoolv1.PublishMessage{Key: make([]byte, 64), Id: strings.Repeat("i", 40), Headers: map[string]string{"a": strings.Repeat("x", 49), "b": strings.Repeat("x", 49)}}
	at.Payload = make([]byte, 4096-64-100)
	resp, st := publish(t, s, "orders", append(many(4), at)...)
	if st.Code() != codes.OK || len(resp.GetResults()) != 5 {
		t.Fatalf("a batch at the limits: %v", st.Err())
	}
}

func ptr[T any](v T) *T { return &v }

// Published messages land where the results say, in request order.
func TestPublishResults(t *testing.T) {
	n := node(t)
	s, m := server(t, n, Limits{})
	resp, st := publish(t, s, "orders",
		&spoolv1.PublishMessage{Key: []byte("a"), Payload: []byte("1")},
		&spoolv1.PublishMessage{Key: []byte("a"), Payload: []byte("2"), Id: "my-id"},
		&spoolv1.PublishMessage{Payload: []byte("3"), Partition: ptr(int32(2))})
	if st.Code() != codes.OK {
		t.Fatal(st.Err())
	}
	r := resp.GetResults()
	if r[0].GetPartition() != engine.PartitionForKey([]byte("a"), 4) || r[1].GetPartition() != r[0].GetPartition() || r[1].GetOffset() != r[0].GetOffset()+1 {
		t.Fatalf("keyed results: %v", r)
	}
	if r[1].GetId() != "my-id" || r[0].GetId() == "" || r[2].GetPartition() != 2 {
		t.Fatalf("results: %v", r)
	}
	recs, err := n.Fetch("orders", r[1].GetPartition(), r[1].GetOffset(), 1<<20, nil)
	if err != nil || len(recs) == 0 || string(recs[0].Value) != "2" || string(recs[0].ID) != "my-id" {
		t.Fatalf("fetch at the result's offset: %v %v", recs, err)
	}
	if got := rejected(t, m); len(got) != 0 {
		t.Fatalf("rejections counted for a good publish: %v", got)
	}
}

// Errors of the request itself have reasons too.
func TestEmptyTopicAndEmptyRequest(t *testing.T) {
	s, m := server(t, node(t), Limits{})
	msg := &spoolv1.PublishMessage{Payload: []byte("x")}
	for _, c := range []struct {
		name, topic string
		msgs        []*spoolv1.PublishMessage
		reason      string
		code        codes.Code
	}{
		{"empty topic", "", []*spoolv1.PublishMessage{msg}, "TOPIC_REQUIRED", codes.InvalidArgument},
		{"no messages", "orders", nil, "NO_MESSAGES", codes.InvalidArgument},
		{"unknown topic", "nope", []*spoolv1.PublishMessage{msg}, "UNKNOWN_TOPIC", codes.NotFound},
		{"bad characters", "or/ders", []*spoolv1.PublishMessage{msg}, "INVALID_TOPIC_NAME", codes.InvalidArgument},
	} {
		_, st := publish(t, s, c.topic, c.msgs...)
		if st.Code() != c.code || reasonOfStatus(st) != c.reason {
			t.Errorf("%s: got %s %q (%s), want %s %s", c.name, st.Code(), reasonOfStatus(st), st.Message(), c.code, c.reason)
		}
	}
	if got := rejected(t, m); got[[2]string{OtherTopic, "TOPIC_REQUIRED"}] != 1 || got[[2]string{"orders", "NO_MESSAGES"}] != 0 {
		t.Errorf("rejections: %v", got)
	}
}

// Defect 3: a topic name is bounded, and publishing to unknown topics does
// not create a series per name: 10,000 distinct unknown topics and 50 names
// of 256 KiB leave publish_rejected_total with a handful of series.
func TestUnknownTopicsDoNotGrowMetrics(t *testing.T) {
	s, m := server(t, node(t), Limits{})
	msg := &spoolv1.PublishMessage{Payload: []byte("x")}
	for i := range 10_000 {
		if _, st := publish(t, s, fmt.Sprintf("unknown-%d", i), msg); st.Code() != codes.NotFound {
			t.Fatalf("unknown topic: %v", st.Err())
		}
	}
	long := strings.Repeat("t", 256<<10)
	for i := range 50 {
		_, st := publish(t, s, fmt.Sprint(long, i), msg)
		if st.Code() != codes.InvalidArgument || reasonOfStatus(st) != "INVALID_TOPIC_NAME" {
			t.Fatalf("a 256 KiB topic name: %s %q, want INVALID_ARGUMENT INVALID_TOPIC_NAME", st.Code(), reasonOfStatus(st))
		}
		if len(st.Message()) > 1024 {
			t.Fatalf("the error echoes the whole name back: %d bytes", len(st.Message()))
		}
	}
	// 201 bytes of valid characters: over the limit of declared names.
	if _, st := publish(t, s, strings.Repeat("a", 201), msg); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "200") {
		t.Fatalf("a 201-byte name: %s %q %s", st.Code(), reasonOfStatus(st), st.Message())
	}
	got := rejected(t, m)
	if len(got) > 3 {
		t.Fatalf("spool_publish_rejected_total has %d series after 10,050 unknown topics: labels must not come from requests", len(got))
	}
	if got[[2]string{OtherTopic, "UNKNOWN_TOPIC"}] != 10_000 || got[[2]string{OtherTopic, "INVALID_TOPIC_NAME"}] != 51 {
		t.Fatalf("rejections: %v", got)
	}
}

// failing is an engine whose appends fail with err (fault injection: a
// real full disk is not something a unit test can arrange).
type failing struct{ err error }

func (failing) Partitions(string) (int32, error) { return 2, nil }
func (f failing) ProduceWith(_ string, _ int32, _ []engine.Record, _ engine.ProduceOptions, done func(int64, error)) {
	done(0, f.err)
}

// Defect 15: on a full disk the status says DISK_FULL (RESOURCE_EXHAUSTED)
// and the metric counts the same reason, not INTERNAL.
func TestEngineFailuresKeepTheirReasonInTheMetric(t *testing.T) {
	diskFull := fmt.Errorf("spool log: disk full during write of 0.log: %w", &os.PathError{Op: "write", Path: "0.log", Err: syscall.ENOSPC})
	for _, c := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{diskFull, codes.ResourceExhausted, "DISK_FULL"},
		{fmt.Errorf("%w: log closed", engine.ErrClosed), codes.Unavailable, "SHUTTING_DOWN"},
		{&engine.NotLeaderError{Topic: "t", Partition: 1}, codes.Unavailable, "NOT_LEADER"},
		{engine.ErrOutcomeUnknown, codes.Unknown, "OUTCOME_UNKNOWN"},
		{errors.New("EIO"), codes.Internal, "INTERNAL"},
	} {
		s, m := server(t, failing{c.err}, Limits{})
		_, st := publish(t, s, "t", &spoolv1.PublishMessage{Payload: []byte("x")}, &spoolv1.PublishMessage{Payload: []byte("y")})
		if st.Code() != c.code || reasonOfStatus(st) != c.reason {
			t.Errorf("%v: status %s %q, want %s %s", c.err, st.Code(), reasonOfStatus(st), c.code, c.reason)
		}
		if got := rejected(t, m); got[[2]string{"t", c.reason}] != 2 || len(got) != 1 {
			t.Errorf("%v: spool_publish_rejected_total %v, want {t,%s}=2 only", c.err, got, c.reason)
		}
	}
}

// A caller that gives up before the log answers is told the outcome is
// unknown; closing the node answers SHUTTING_DOWN.
func TestClosedEngine(t *testing.T) {
	n, err := embedded.Open(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := server(t, n, Limits{})
	_, st := publish(t, s, "orders", &spoolv1.PublishMessage{Payload: []byte("x")})
	if st.Code() != codes.Unavailable || reasonOfStatus(st) != "SHUTTING_DOWN" {
		t.Fatalf("publish to a closed node: %s %q %s", st.Code(), reasonOfStatus(st), st.Message())
	}
}
