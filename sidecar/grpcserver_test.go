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
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sidecar/config"
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

// Invalid UTF-8 in a string field (topic, group, id, header) is
// INVALID_ARGUMENT with reason INVALID_REQUEST naming the field, on every
// RPC, unary or stream, of the app and admin servers: it used to be
// gRPC's INTERNAL from the decoder, before any Spool code ran.
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	conn := serveApp(t, subscriber{})
	admin := serveAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := []byte{0xff, 0xfe}
	str := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	// PublishMessage{payload: "x", headers: {"k": bad}}
	entry := append(str(1, []byte("k")), str(2, bad)...)
	badHeader := append(str(3, []byte("x")), str(4, entry)...)
	want := func(what string, err error, field string) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || reasonOf(err) != "INVALID_REQUEST" || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: %v (reason %q), want INVALID_ARGUMENT INVALID_REQUEST naming %s and UTF-8", what, err, reasonOf(err), field)
		}
	}
	var resp []byte
	raw := grpc.ForceCodecV2(rawCodec{})
	// PublishRequest{topic: bad}
	err := conn.Invoke(ctx, "/spool.v1.PublisherService/Publish", str(1, bad), &resp, raw)
	want("publish with a topic that is not UTF-8", err, "topic")
	// PublishRequest{topic: "orders", messages: [ok, bad header]}
	req := append(str(1, []byte("orders")), str(2, str(3, []byte("x")))...)
	req = append(req, str(2, badHeader)...)
	err = conn.Invoke(ctx, "/spool.v1.PublisherService/Publish", req, &resp, raw)
	want("publish with a header value that is not UTF-8", err, "messages[1].headers.value")
	// A PublishStream frame {sequence: 1, topic: bad}.
	err = rawStream(ctx, conn, "/spool.v1.PublisherService/PublishStream", append([]byte{0x08, 0x01}, str(2, bad)...))
	want("publish stream with a topic that is not UTF-8", err, "topic")
	// SubscribeRequest{start: {group: bad}}
	err = rawStream(ctx, conn, "/spool.v1.SubscriberService/Subscribe", str(1, str(1, bad)))
	want("subscribe with a group that is not UTF-8", err, "start.group")
	// AdminService.ListGroups{group: bad}
	err = admin.Invoke(ctx, "/spool.v1.AdminService/ListGroups", str(1, bad), &resp, raw)
	want("admin ListGroups with a group that is not UTF-8", err, "group")
	// The server is fine afterwards.
	if _, err := spoolv1.NewPublisherServiceClient(conn).Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{{Payload: []byte("x")}}}); err != nil {
		t.Fatalf("a good publish after the refusals: %v", err)
	}
}

// rawStream sends one raw frame on a new stream and returns the error that
// ends it.
func rawStream(ctx context.Context, conn *grpc.ClientConn, method string, frame []byte) error {
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := s.SendMsg(frame); err != nil {
		return err
	}
	var resp []byte
	for {
		if err := s.RecvMsg(&resp); err != nil {
			return err
		}
	}
}

// serveAdmin runs spoold's admin gRPC server (with its interceptors) on an
// in-memory listener over a real engine.
func serveAdmin(t *testing.T) *grpc.ClientConn {
	t.Helper()
	eng, err := embedded.Open(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := newGRPCServer(slog.New(slog.DiscardHandler), MaxRequestBytes, nil)
	spoolv1.RegisterAdminServiceServer(srv, newAdmin(&config.Config{}, eng, nil, nil, metrics.New()))
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
		_ = eng.Close()
	})
	return conn
}

// spoold's keepalive enforcement permits the Go SDK's pings (gRPC's
// default policy, one ping per 5 minutes and none without a call, would
// answer them with GOAWAY too_many_pings and cut the app off), and spoold
// pings no more often than it lets its clients ping. The Python,
// TypeScript and Java SDKs ping every 10 s too (their sdk guides).
func TestKeepalivePolicyPermitsTheSDKsPings(t *testing.T) {
	if KeepaliveMinTime > spool.KeepaliveTime {
		t.Fatalf("spoold refuses pings more often than every %v; the Go SDK pings every %v", KeepaliveMinTime, spool.KeepaliveTime)
	}
	if KeepaliveTime < KeepaliveMinTime {
		t.Fatalf("spoold pings every %v, more often than the %v it permits its clients", KeepaliveTime, KeepaliveMinTime)
	}
}
