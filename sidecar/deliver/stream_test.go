package deliver

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// serve runs the Subscribe server of h's group on an in-memory listener and
// returns a client connection.
func serve(t *testing.T, h *harness) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	spoolv1.RegisterSubscriberServiceServer(srv, NewServer([]*Group{h.g}, h.m, slog.New(slog.DiscardHandler)))
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn
}

// Defect 18: frames are bounded in bytes below what the client said it can
// receive, and a single delivery larger than that is refused with a notice
// on a stream that stays up.
func TestFramesFitTheClientsReceiveLimit(t *testing.T) {
	const limit = 1 << 20
	eng := newTestEngine()
	for range 100 {
		eng.publish(tTopic, 0, msg("m", make([]byte, 64<<10)))
	}
	eng.publish(tTopic, 0, msg("big", make([]byte, 2<<20)))
	eng.publish(tTopic, 0, msg("after", []byte("small")))
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{})}})
	conn := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := spoolv1.NewSubscriberServiceClient(conn).Subscribe(ctx, grpc.MaxCallRecvMsgSize(limit))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&spoolv1.SubscribeRequest{Start: &spoolv1.Start{Group: tGroup, MaxReceiveBytes: limit}, Credit: 1000}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if mf := first.GetStarted().GetMaxFrameBytes(); mf == 0 || mf > limit {
		t.Fatalf("Started.max_frame_bytes = %d, want in (0, %d]", mf, limit)
	}
	got, notice := 0, ""
	for got < 101 || notice == "" {
		f, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d deliveries: %v", got, err)
		}
		for _, d := range f.GetDeliveries() {
			if string(d.GetMessageId()) == "big" {
				t.Fatal("the 2 MiB delivery was sent to a stream that receives 1 MiB")
			}
			got++
		}
		for _, e := range f.GetSettleErrors() {
			if e.GetReason() == ReasonDeliveryTooLarge {
				notice = e.GetMessage()
			}
		}
	}
	if !strings.Contains(notice, "max_receive_bytes") {
		t.Fatalf("notice %q does not say what to raise", notice)
	}
}

// Item 15 of the driver review: Started.max_in_flight must be what the
// stream really gets: the smaller of the client's Start.max_in_flight and
// the subscription's max_in_flight × partitions, never more than asked.
func TestStartedReportsTheStreamsBound(t *testing.T) {
	eng := newTestEngine()
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxInFlight: 256})}})
	conn := serve(t, h)
	parts := int(h.g.partitions(tTopic))
	for _, c := range []struct{ asked, want int }{
		{5, 5},
		{0, 256 * parts},
		{1_000_000, 256 * parts},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		stream, err := spoolv1.NewSubscriberServiceClient(conn).Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&spoolv1.SubscribeRequest{Start: &spoolv1.Start{Group: tGroup, MaxInFlight: uint32(c.asked)}}); err != nil {
			t.Fatal(err)
		}
		f, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := int(f.GetStarted().GetMaxInFlight()); got != c.want {
			t.Errorf("Start.max_in_flight %d: Started.max_in_flight = %d, want %d", c.asked, got, c.want)
		}
		cancel()
	}
}

// TestConsumerNameBounded: a consumer name over MaxConsumerNameBytes is
// INVALID_ARGUMENT before anything is logged (five 8 MB names once wrote
// 320 MB of log: the name is logged at connect and disconnect).
func TestConsumerNameBounded(t *testing.T) {
	eng := newTestEngine()
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxInFlight: 256})}})
	conn := serve(t, h)
	for _, c := range []struct {
		name string
		ok   bool
	}{{strings.Repeat("n", MaxConsumerNameBytes), true}, {strings.Repeat("n", MaxConsumerNameBytes+1), false}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		stream, err := spoolv1.NewSubscriberServiceClient(conn).Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&spoolv1.SubscribeRequest{Start: &spoolv1.Start{Group: tGroup, ConsumerName: c.name}}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if c.ok && err != nil {
			t.Fatalf("%d bytes: %v", len(c.name), err)
		}
		if !c.ok && (status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "consumer_name")) {
			t.Fatalf("%d bytes: %v, want INVALID_ARGUMENT naming consumer_name", len(c.name), err)
		}
		want := 0.0
		if !c.ok {
			want = 1
		}
		if got := testutil.ToFloat64(h.m.SubscribeRefused.WithLabelValues(RefusedConsumerNameTooLong)); got != want {
			t.Errorf("after a name of %d bytes: spool_subscribe_refused_total{reason=%q} = %v, want %v", len(c.name), RefusedConsumerNameTooLong, got, want)
		}
		cancel()
	}
}
