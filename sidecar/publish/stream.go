package publish

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
)

// PublishStream pipelines publishes: each request is appended as soon as it
// arrives and answered when durable, quoting its sequence number. A bad
// request is answered with an error and the stream stays open.
func (s *Server) PublishStream(stream grpc.BidiStreamingServer[spoolv1.PublishStreamRequest, spoolv1.PublishStreamResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// Answers go through one sender goroutine (gRPC streams allow one sender).
	// The slots channel bounds requests in flight; the sender frees a slot
	// when it sends the answer.
	slots := make(chan struct{}, s.cfg.MaxStreamInFlight)
	answers := make(chan *spoolv1.PublishStreamResponse, s.cfg.MaxStreamInFlight)
	sendErr := make(chan error, 1)
	go func() { // owned by this call: it ends when ctx is cancelled or all answers are sent
		sendErr <- sendLoop(ctx, stream, answers, slots)
	}()
	var recvErr error
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return <-sendErr
		}
		req, err := stream.Recv()
		if err != nil {
			<-slots
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		seq := req.GetSequence()
		// Nothing more is read from this stream until the request fits in
		// publish.memory_bytes (memory.go).
		held, err := s.mem.acquire(ctx, requestBytes(req.GetMessages()))
		if err != nil {
			<-slots
			return <-sendErr
		}
		s.Submit(ctx, req.GetTopic(), req.GetAcks(), req.GetMessages(), func(r []*spoolv1.PublishResult, err error) {
			s.mem.release(held)
			resp := &spoolv1.PublishStreamResponse{Sequence: seq, Results: r}
			if err != nil {
				st := apierr.Status(err)
				resp.Results = nil
				resp.Error = &spoolv1.Error{Code: int32(st.Code()), Reason: string(apierr.Classify(err)), Message: st.Message()}
			}
			answers <- resp // never blocks: at most MaxStreamInFlight answers exist
		})
	}
	// Wait for the answers of every request still in flight, then end.
	for range cap(slots) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return <-sendErr
		}
	}
	cancel()
	if err := <-sendErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return recvErr
}

func sendLoop(ctx context.Context, stream grpc.BidiStreamingServer[spoolv1.PublishStreamRequest, spoolv1.PublishStreamResponse], answers <-chan *spoolv1.PublishStreamResponse, slots <-chan struct{}) error {
	for {
		select {
		case resp := <-answers:
			if err := stream.Send(resp); err != nil {
				return err
			}
			<-slots
		case <-ctx.Done():
			// Drain answers already produced so that no callback is left holding a slot.
			for {
				select {
				case resp := <-answers:
					_ = stream.Send(resp)
					<-slots
				default:
					return ctx.Err()
				}
			}
		}
	}
}
