package spool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

func TestPublishReturnsResult(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	res, err := e.client.Publish(ctx, "orders", []byte("order-1"), []byte(`{"total":12}`),
		spool.WithID("ord-1"), spool.WithHeaders(map[string]string{"a": "1"}), spool.WithHeader("b", "2"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != "ord-1" || res.Offset != 0 {
		t.Fatalf("result = %+v", res)
	}
	res2, err := e.client.Publish(ctx, "orders", nil, []byte("x"))
	if err != nil || res2.Offset != 1 || res2.ID == "" {
		t.Fatalf("second publish = %+v, %v", res2, err)
	}
	p := e.side.Record().Published[0]
	if string(p.GetKey()) != "order-1" || p.GetHeaders()["a"] != "1" || p.GetHeaders()["b"] != "2" {
		t.Fatalf("published = %v", p)
	}
}

func TestPublishBatch(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	rs, err := e.client.PublishBatch(ctxT(t), "orders", []spool.OutMessage{{ID: "a", Payload: []byte("1")}, {Payload: []byte("2")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "a" || rs[1].Offset != 1 {
		t.Fatalf("results = %+v", rs)
	}
}

func TestPublishErrorsSayWhatToDo(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	if _, err := e.client.Publish(ctxT(t), "", nil, []byte("x")); err == nil || !strings.Contains(err.Error(), "name the topic") {
		t.Fatalf("err = %v", err)
	}
	c, err := spool.Dial(ctxT(t), "127.0.0.1:1", spool.WithConnectTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Publish(ctxT(t), "orders", nil, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "is spoold running at 127.0.0.1:1") {
		t.Fatalf("err = %v", err)
	}
}

func TestPublisherPipelines(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	p := e.client.Publisher(ctx, "orders", spool.WithMaxInFlight(8))
	var fs []*spool.Future
	for i := 0; i < 100; i++ {
		fs = append(fs, p.Publish(nil, []byte(fmt.Sprint(i)), spool.WithID(fmt.Sprint("id-", i))))
	}
	var mu sync.Mutex
	var cbs []spool.PublishResult
	done := make(chan struct{})
	p.PublishFunc(nil, []byte("cb"), func(r spool.PublishResult, err error) {
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		cbs = append(cbs, r)
		mu.Unlock()
		close(done)
	})
	for i, f := range fs {
		r, err := f.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.ID != fmt.Sprint("id-", i) || r.Offset != int64(i) {
			t.Fatalf("future %d = %+v", i, r)
		}
	}
	<-done
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if cbs[0].Offset != 100 {
		t.Fatalf("callback result = %+v", cbs[0])
	}
	if f := p.Publish(nil, []byte("late")); f != nil {
		if _, err := f.Wait(ctx); err == nil || !strings.Contains(err.Error(), "publisher closed") {
			t.Fatalf("publish after Close: %v", err)
		}
	}
}

func TestPublisherFailsWhenSidecarGoes(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	p := e.client.Publisher(ctx, "orders")
	defer p.Close()
	if _, err := p.Publish(nil, []byte("1")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	e.side.Stop()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := p.Publish(nil, []byte("2")).Wait(wctx)
	if err == nil || !strings.Contains(err.Error(), "same WithID") && !strings.Contains(err.Error(), "spoold running") {
		t.Fatalf("err = %v", err)
	}
}

// recvGuard wraps the client end of every PublishStream. It counts RecvMsg
// calls that overlap (gRPC forbids two goroutines in RecvMsg on one stream:
// they can race for the stream's status and one then waits forever), and,
// once armed, makes the next SendMsg see the stream ended by the sidecar
// while the Publisher's receiver has not yet returned the status: the moment
// a sidecar restart can hit.
type recvGuard struct {
	side *fakesidecar.Sidecar

	mu         sync.Mutex
	inRecv     int
	concurrent int // RecvMsg calls that began while another was in progress
	armed      bool
	statusSeen chan struct{} // closed when RecvMsg got the status of the armed stream
	eofSent    chan struct{} // closed when the armed SendMsg returned io.EOF
}

func newRecvGuard() *recvGuard {
	return &recvGuard{statusSeen: make(chan struct{}), eofSent: make(chan struct{})}
}

func (g *recvGuard) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *recvGuard) overlaps() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.concurrent
}

func (g *recvGuard) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != spoolv1.PublisherService_PublishStream_FullMethodName {
		return cs, err
	}
	return &guardedStream{ClientStream: cs, g: g}, nil
}

type guardedStream struct {
	grpc.ClientStream
	g *recvGuard
}

func (s *guardedStream) SendMsg(m any) error {
	g := s.g
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if !armed {
		return s.ClientStream.SendMsg(m)
	}
	// The sidecar goes away; gRPC reports that to a sender as io.EOF, the
	// status being for RecvMsg.
	g.side.EndPublishStreams(status.Error(codes.Unavailable, "sidecar restarting"))
	select {
	case <-g.statusSeen:
	case <-time.After(5 * time.Second):
		return errors.New("recvGuard: the receiver never got the stream's status")
	}
	close(g.eofSent)
	return io.EOF
}

func (s *guardedStream) RecvMsg(m any) error {
	g := s.g
	g.mu.Lock()
	g.inRecv++
	overlap := g.inRecv > 1
	if overlap {
		g.concurrent++
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inRecv--
		g.mu.Unlock()
	}()
	if overlap {
		return status.Error(codes.Internal, "recvGuard: RecvMsg called while another goroutine is in RecvMsg on this stream")
	}
	err := s.ClientStream.RecvMsg(m)
	if err != nil && !isClosed(g.statusSeen) {
		close(g.statusSeen)
		// Hold the status until the sender has seen its io.EOF and had the
		// chance to misbehave; a correct Publisher waits for this receiver.
		select {
		case <-g.eofSent:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(100 * time.Millisecond) // sleep-ok: the window in which a second RecvMsg would overlap this one (it comes within microseconds); a correct Publisher passes whatever the timing
	}
	return err
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A sidecar that goes away while a request is being sent: the Publisher must
// take the stream's status from its one receiving goroutine (never a second
// RecvMsg), fail the request with that status, and still Close promptly.
func TestPublisherStreamEndsDuringSend(t *testing.T) {
	side, err := fakesidecar.Start(fakesidecar.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer side.Stop()
	g := newRecvGuard()
	g.side = side
	c, err := spool.Dial(ctxT(t), side.Addr(), spool.WithGRPCDialOptions(grpc.WithStreamInterceptor(g.interceptor)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	p := c.Publisher(ctx, "orders")
	if _, err := p.Publish(nil, []byte("1")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	g.arm()
	_, err = p.Publish(nil, []byte("2")).Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "sidecar restarting") || !strings.Contains(err.Error(), "same WithID") {
		t.Fatalf("publish while the stream ended: err = %v, want the stream's status and what to do", err)
	}
	if n := g.overlaps(); n != 0 {
		t.Fatalf("%d RecvMsg calls overlapped another on the same stream", n)
	}
	// The sidecar is still there: the next publish opens a new stream.
	if _, err := p.Publish(nil, []byte("3")).Wait(ctx); err != nil {
		t.Fatalf("publish on a new stream: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Publisher.Close did not return within 5 s")
	}
}

// A sidecar that answers (here: its disk is full) is running: the error says
// what it answered and does not ask whether spoold runs.
func TestDiskFullIsNotAMissingSidecar(t *testing.T) {
	st, err := status.New(codes.Unavailable, "publish: write orders/0: no space left on device").
		WithDetails(&errdetails.ErrorInfo{Reason: "DISK_FULL", Domain: "spool.dev"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fakesidecar.Config{PublishError: st.Err()})
	_, err = e.client.Publish(ctxT(t), "orders", nil, []byte("x"))
	if err == nil || strings.Contains(err.Error(), "spoold running") || !strings.Contains(err.Error(), "DISK_FULL") ||
		!strings.Contains(err.Error(), "same message ids") {
		t.Fatalf("err = %v, want the sidecar's reason (DISK_FULL), what to do, and no question whether spoold runs", err)
	}
}

// swallowSends makes every PublishStream send vanish: a sidecar that takes
// requests and never answers.
func swallowSends(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != spoolv1.PublisherService_PublishStream_FullMethodName {
		return cs, err
	}
	return swallowingStream{cs}, nil
}

type swallowingStream struct{ grpc.ClientStream }

func (swallowingStream) SendMsg(any) error { return nil }

// Close returns within its timeout when the sidecar never answers, failing
// what is unconfirmed, even though the Publisher's ctx has no end.
func TestPublisherCloseIsBounded(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	c, err := spool.Dial(ctxT(t), e.side.Addr(), spool.WithGRPCDialOptions(grpc.WithStreamInterceptor(swallowSends)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.Publisher(context.Background(), "orders", spool.WithCloseTimeout(50*time.Millisecond))
	f := p.Publish(nil, []byte("never answered"))
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "1 messages unconfirmed") || !strings.Contains(err.Error(), "WithCloseTimeout") {
			t.Fatalf("Close = %v, want an error counting the unconfirmed message", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Publisher.Close did not return within 5 s of a 50 ms close timeout")
	}
	if _, err := f.Wait(ctxT(t)); err == nil || !strings.Contains(err.Error(), "may or may not be stored") {
		t.Fatalf("unconfirmed publish: err = %v", err)
	}
}

// A publish whose outcome the sidecar could not learn (the partition's
// leader was lost before the commit, and its own resends with the same
// producer sequence ran out of time) is not called a refusal: the error
// says it may be stored and to retry with the same message ids.
func TestOutcomeUnknownSaysRetryWithTheSameIDs(t *testing.T) {
	st, err := status.New(codes.Unknown, "publish orders/0: outcome of append unknown: no answer after 10s").
		WithDetails(&errdetails.ErrorInfo{Reason: "OUTCOME_UNKNOWN", Domain: "spool.dev"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fakesidecar.Config{PublishError: st.Err()})
	_, err = e.client.Publish(ctxT(t), "orders", nil, []byte("x"), spool.WithID("order-1"))
	if err == nil || strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "may or may not be stored") ||
		!strings.Contains(err.Error(), "same message ids") || !strings.Contains(err.Error(), "OUTCOME_UNKNOWN") {
		t.Fatalf("err = %v, want OUTCOME_UNKNOWN said as unknown (not refused), with what to do", err)
	}
	if !errors.Is(err, spool.ErrOutcomeUnknown) {
		t.Fatalf("errors.Is(err, spool.ErrOutcomeUnknown) = false for %v", err)
	}
}

// spool.Reason reads the sidecar's reason out of the SDK's (wrapped) errors.
func TestReasonOfAnError(t *testing.T) {
	st, err := status.New(codes.NotFound, "publish: unknown topic \"ordrs\"").
		WithDetails(&errdetails.ErrorInfo{Reason: "UNKNOWN_TOPIC", Domain: "spool.dev"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fakesidecar.Config{PublishError: st.Err()})
	_, err = e.client.Publish(ctxT(t), "ordrs", nil, []byte("x"))
	if got := spool.Reason(err); got != "UNKNOWN_TOPIC" {
		t.Fatalf("Reason(%v) = %q, want UNKNOWN_TOPIC", err, got)
	}
	if got := spool.Reason(fmt.Errorf("checkout: %w", err)); got != "UNKNOWN_TOPIC" {
		t.Fatalf("Reason of a wrapped error = %q", got)
	}
	if got := spool.Reason(errors.New("plain")); got != "" {
		t.Fatalf("Reason of a plain error = %q, want empty", got)
	}
}

func TestPublishScheduled(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("a"), spool.WithDeliverAt(at)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("b"), spool.WithDeliverAfter(90*time.Second), spool.WithDeliverInKeyOrder()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("c"), spool.WithDeliverAt(time.Time{})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.PublishBatch(ctx, "orders", []spool.OutMessage{{Payload: []byte("d"), DeliverAt: at}, {Payload: []byte("e"), DeliverAfter: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	type sched struct{ at, after int64 }
	var got []sched
	for _, p := range e.side.Record().Published {
		got = append(got, sched{p.GetDeliverAtMs(), p.GetDeliverAfterMs()})
	}
	want := []sched{{at.UnixMilli(), 0}, {0, 90_000}, {0, 0}, {at.UnixMilli(), 0}, {0, 2000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published (deliver_at_ms, deliver_after_ms) = %v, want %v", got, want)
	}
	for i, p := range e.side.Record().Published {
		if p.GetDeliverInKeyOrder() != (i == 1) {
			t.Fatalf("message %d: deliver_in_key_order = %v", i, p.GetDeliverInKeyOrder())
		}
	}
}
