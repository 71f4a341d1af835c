package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/publish"
)

// serveApp runs spoold's app gRPC server (with its interceptors) on an
// in-memory listener, with publishing on a real engine (topic "orders")
// and sub as the subscriber service.
func serveApp(t *testing.T, sub spoolv1.SubscriberServiceServer) *grpc.ClientConn {
	t.Helper()
	eng, err := embedded.Open(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(ctx) }()
	pub, err := publish.New(publish.Config{Engine: eng, Metrics: metrics.New()})
	if err != nil {
		t.Fatal(err)
	}
	srv := newGRPCServer(slog.New(slog.DiscardHandler), MaxRequestBytes, nil)
	spoolv1.RegisterPublisherServiceServer(srv, pub)
	if sub != nil {
		spoolv1.RegisterSubscriberServiceServer(srv, sub)
	}
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-served
		cancel()
		<-engDone
		_ = eng.Close()
	})
	return conn
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// Defect 15: an empty topic and an empty request are answered with a
// reason, and on a PublishStream a bad frame is answered in-band without
// ending the stream (the request validator used to end it, reasonless).
func TestRequestValidationHasReasons(t *testing.T) {
	conn := serveApp(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := spoolv1.NewPublisherServiceClient(conn)
	msg := &spoolv1.PublishMessage{Payload: []byte("x")}
	for _, req := range []struct {
		r      *spoolv1.PublishRequest
		reason string
	}{
		{&spoolv1.PublishRequest{Messages: []*spoolv1.PublishMessage{msg}}, "TOPIC_REQUIRED"},
		{&spoolv1.PublishRequest{Topic: "orders"}, "NO_MESSAGES"},
	} {
		_, err := c.Publish(ctx, req.r)
		if status.Code(err) != codes.InvalidArgument || reasonOf(err) != req.reason {
			t.Errorf("Publish(%v): %v (reason %q), want INVALID_ARGUMENT %s", req.r, err, reasonOf(err), req.reason)
		}
	}
	stream, err := c.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*spoolv1.PublishStreamRequest{
		{Sequence: 1, Messages: []*spoolv1.PublishMessage{msg}},
		{Sequence: 2, Topic: "orders"},
		{Sequence: 3, Topic: "orders", Messages: []*spoolv1.PublishMessage{msg}},
	} {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	got := map[uint64]string{}
	for range 3 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended after %v: %v (reason %q)", got, err, reasonOf(err))
		}
		got[resp.GetSequence()] = resp.GetError().GetReason()
	}
	if got[1] != "TOPIC_REQUIRED" || got[2] != "NO_MESSAGES" || got[3] != "" {
		t.Fatalf("answers by sequence: %v", got)
	}
}

// subscriber ends the stream with the error of its first Recv.
type subscriber struct {
	spoolv1.UnimplementedSubscriberServiceServer
}

func (subscriber) Subscribe(s grpc.BidiStreamingServer[spoolv1.SubscribeRequest, spoolv1.SubscribeResponse]) error {
	_, err := s.Recv()
	if err == io.EOF {
		return nil
	}
	return err
}

// A frame that breaks a rule of the protocol (here an ack without ref) is
// INVALID_ARGUMENT with reason INVALID_REQUEST.
func TestInvalidFrameHasAReason(t *testing.T) {
	conn := serveApp(t, subscriber{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := spoolv1.NewSubscriberServiceClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{}}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	if status.Code(err) != codes.InvalidArgument || reasonOf(err) != "INVALID_REQUEST" || !strings.Contains(err.Error(), "ref is missing") {
		t.Fatalf("ack without ref: %v (reason %q), want INVALID_ARGUMENT INVALID_REQUEST", err, reasonOf(err))
	}
}

// rawCodec sends bytes as they are, to put what a protobuf encoder refuses
// on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// docs/errors.md: invalid UTF-8 in a string field is refused by gRPC's
// protobuf decoder, before any Spool code runs, with INTERNAL.
func TestInvalidUTF8IsRefusedByTheDecoder(t *testing.T) {
	conn := serveApp(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// PublishRequest{topic: "\xff\xfe"}: field 1, length-delimited, 2 bytes.
	req := []byte{0x0a, 0x02, 0xff, 0xfe}
	var resp []byte
	err := conn.Invoke(ctx, "/spool.v1.PublisherService/Publish", req, &resp, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "invalid UTF-8") {
		t.Fatalf("invalid UTF-8 topic: %v, want INTERNAL naming invalid UTF-8 (as docs/errors.md says)", err)
	}
}
