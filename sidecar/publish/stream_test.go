package publish

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// client serves s on an in-memory listener and returns a client.
func client(t *testing.T, s *Server) spoolv1.PublisherServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	spoolv1.RegisterPublisherServiceServer(gs, s)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-served
	})
	return spoolv1.NewPublisherServiceClient(conn)
}

// A refused request on a PublishStream is answered in-band with its code
// and reason, and the stream goes on serving later requests.
func TestStreamAnswersErrorsInBand(t *testing.T) {
	s, m := server(t, node(t), small)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client(t, s).PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := &spoolv1.PublishMessage{Payload: []byte("x")}
	reqs := []*spoolv1.PublishStreamRequest{
		{Sequence: 1, Topic: "orders", Messages: []*spoolv1.PublishMessage{msg}},
		{Sequence: 2, Topic: "nope", Messages: []*spoolv1.PublishMessage{msg}},
		{Sequence: 3, Topic: "", Messages: []*spoolv1.PublishMessage{msg}},
		{Sequence: 4, Topic: "orders", Messages: []*spoolv1.PublishMessage{{Key: make([]byte, 65)}}},
		{Sequence: 5, Topic: "orders", Messages: []*spoolv1.PublishMessage{msg, msg}},
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]struct {
		code   codes.Code
		reason string
	}{1: {codes.OK, ""}, 2: {codes.NotFound, "UNKNOWN_TOPIC"}, 3: {codes.InvalidArgument, "TOPIC_REQUIRED"}, 4: {codes.InvalidArgument, "KEY_TOO_LARGE"}, 5: {codes.OK, ""}}
	for range reqs {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended early: %v", err)
		}
		w, ok := want[resp.GetSequence()]
		if !ok {
			t.Fatalf("answer for an unknown or repeated sequence %d", resp.GetSequence())
		}
		delete(want, resp.GetSequence())
		e := resp.GetError()
		if codes.Code(e.GetCode()) != w.code || e.GetReason() != w.reason {
			t.Errorf("request %d: %s %q (%s), want %s %q", resp.GetSequence(), codes.Code(e.GetCode()), e.GetReason(), e.GetMessage(), w.code, w.reason)
		}
		if w.code == codes.OK && len(resp.GetResults()) == 0 {
			t.Errorf("request %d: no results", resp.GetSequence())
		}
	}
	if got := rejected(t, m); got[[2]string{OtherTopic, "UNKNOWN_TOPIC"}] != 1 || got[[2]string{"orders", "KEY_TOO_LARGE"}] != 1 {
		t.Errorf("rejections: %v", got)
	}
}
