package deliver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// Server implements spoolv1.SubscriberServiceServer over the node's groups.
type Server struct {
	spoolv1.UnimplementedSubscriberServiceServer
	groups map[string]*Group
	log    *slog.Logger
	met    *metrics.Metrics
	// authorize, if set, decides whether the caller of ctx may consume
	// topics as group (sidecar/apps scopes); its error ends the stream.
	authorize func(ctx context.Context, group string, topics []string) error
}

// Authorize makes every Subscribe ask f, once its group and topics are
// resolved, whether the caller may consume them. It returns s.
func (s *Server) Authorize(f func(ctx context.Context, group string, topics []string) error) *Server {
	s.authorize = f
	return s
}

// MaxConsumerNameBytes bounds Start.consumer_name: the name is logged when
// the stream connects and when it ends, and shown by the admin API.
const MaxConsumerNameBytes = 256

// RefusedConsumerNameTooLong is the reason of spool_subscribe_refused_total
// for a name over MaxConsumerNameBytes.
const RefusedConsumerNameTooLong = "consumer_name_too_long"

// NewServer returns a Subscribe server for groups, counting its refusals
// in m.
func NewServer(groups []*Group, m *metrics.Metrics, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{groups: map[string]*Group{}, log: logger, met: m}
	if m != nil {
		m.SubscribeRefused.WithLabelValues(RefusedConsumerNameTooLong) // the series exists from the start
	}
	for _, g := range groups {
		s.groups[g.Name()] = g
	}
	return s
}

// Subscribe serves one application stream: Start, then deliveries within
// the credit granted, and settlements back.
func (s *Server) Subscribe(stream grpc.BidiStreamingServer[spoolv1.SubscribeRequest, spoolv1.SubscribeResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	st := first.GetStart()
	if st == nil {
		return apierr.ToStatus(apierr.New(apierr.StartRequired, "subscribe: the first frame must carry start{group, topics}: send Start before acks or credit"))
	}
	if n := len(st.GetConsumerName()); n > MaxConsumerNameBytes {
		if s.met != nil {
			s.met.SubscribeRefused.WithLabelValues(RefusedConsumerNameTooLong).Inc()
		}
		return apierr.ToStatus(apierr.New(apierr.InvalidRequest,
			"subscribe: start.consumer_name is %d bytes, the limit is %d (MaxConsumerNameBytes): name the consumer after its pod or process", n, MaxConsumerNameBytes))
	}
	g, topics, maxInFlight, err := s.resolve(st)
	if err != nil {
		return err
	}
	if s.authorize != nil {
		if err := s.authorize(ctx, g.Name(), topics); err != nil {
			return apierr.ToStatus(err)
		}
	}
	c := newConsumer(st.GetConsumerName(), ModeStream, topics, maxInFlight)
	c.appVersion = cutText(st.GetAppVersion(), maxAppVersionBytes)
	c.maxFrameBytes = frameLimit(st.GetMaxReceiveBytes())
	started := &spoolv1.Started{Group: g.Name(), Topics: topics, MaxInFlight: uint32(maxInFlight), MaxFrameBytes: uint32(c.maxFrameBytes)}
	if sc, ok := g.Subscription(topics[0]); ok {
		started.VisibilityTimeoutMs = uint32(sc.Tracker.VisibilityTimeout.Milliseconds())
	}
	if err := stream.Send(&spoolv1.SubscribeResponse{Started: started}); err != nil {
		return err
	}
	if err := g.post(ctx, joinEvent{c}); err != nil {
		return unavailable(err)
	}
	// leave must reach the loop even though ctx has ended: it releases the
	// stream's deliveries at once.
	defer func() { _ = g.post(context.Background(), leaveEvent{c}) }()
	s.log.Info("consumer connected", "group", g.Name(), "topics", topics, "consumer", st.GetConsumerName(), "max_in_flight", maxInFlight)
	defer s.log.Info("consumer disconnected", "group", g.Name(), "consumer", st.GetConsumerName())

	sendCtx, stopSend := context.WithCancel(ctx)
	sendDone := make(chan *spoolv1.SubscribeResponse, 1)
	go func() { // owned by this call: stopped and awaited below
		sendDone <- sendFrames(sendCtx, stream, c.out, time.Now, func(f *spoolv1.SubscribeResponse) {
			_ = g.post(ctx, droppedEvent{c, f}) // if ctx has ended, leave takes the deliveries back
		})
	}()
	defer func() {
		stopSend()
		s.unsent(g, c, <-sendDone)
	}()
	if err := g.post(ctx, settleEvent{c, first}); err != nil {
		return unavailable(err)
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.GetStart() != nil {
			return apierr.ToStatus(apierr.New(apierr.StartRepeated, "subscribe: start may only be sent in the first frame: open a new stream to change group or topics"))
		}
		if err := g.post(ctx, settleEvent{c, req}); err != nil {
			return unavailable(err)
		}
	}
}

func unavailable(err error) error {
	if errors.Is(err, errStopped) {
		return apierr.ToStatus(apierr.Wrap(apierr.ShuttingDown, err, "subscribe: the sidecar is shutting down: reconnect (the SDK does this with backoff)"))
	}
	return apierr.ToStatus(err)
}

// sendFrames sends the consumer's frames until ctx ends or a send fails;
// it returns the frame that failed (nil if none did). A failed send ends
// the stream (gRPC ends a stream whose message it cannot encode). A frame
// whose member has fenced itself by the time it is taken (by clock) is
// given to dropped instead of sent (queued.fenced).
func sendFrames(ctx context.Context, stream grpc.BidiStreamingServer[spoolv1.SubscribeRequest, spoolv1.SubscribeResponse], out <-chan queued,
	clock func() time.Time, dropped func(*spoolv1.SubscribeResponse)) *spoolv1.SubscribeResponse {
	for {
		select {
		case q := <-out:
			if q.fenced(clock) {
				dropped(q.f)
				continue
			}
			if err := stream.Send(q.f); err != nil {
				return q.f
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// unsent hands the group what the stream did not send: the frame whose
// send failed, if any, and those still queued. Before the consumer leaves,
// so that none of their deliveries is charged an attempt, and a delivery
// the sidecar cannot encode is dead-lettered alone (sendFailed).
func (s *Server) unsent(g *Group, c *consumer, failed *spoolv1.SubscribeResponse) {
	var frames []*spoolv1.SubscribeResponse
	if failed != nil {
		frames = append(frames, failed)
	}
	for len(c.out) > 0 {
		frames = append(frames, (<-c.out).f)
	}
	if len(frames) == 0 {
		return
	}
	bad := unsendable(frames)
	if len(bad) > 0 {
		s.log.Error("a delivery could not be encoded for the app's stream; it is dead-lettered, the stream's other deliveries go back uncounted",
			"group", g.Name(), "consumer", c.name, "deliveries", len(bad))
	}
	_ = g.post(context.Background(), sendFailedEvent{c: c, frames: frames, bad: bad})
}

// resolve checks Start against the configured subscriptions.
func (s *Server) resolve(st *spoolv1.Start) (*Group, []string, int, error) {
	g, ok := s.groups[st.GetGroup()]
	if !ok {
		return nil, nil, 0, apierr.ToStatus(apierr.New(apierr.UnknownGroup, "subscribe: no subscriptions for group %q: declare one in spoold's config (subscriptions: - topic: ..., group: %s)", st.GetGroup(), st.GetGroup()))
	}
	topics := slices.Clone(st.GetTopics())
	if len(topics) == 0 {
		topics = g.Topics(ModeStream)
		if len(topics) == 0 {
			return nil, nil, 0, apierr.ToStatus(apierr.New(apierr.WrongDeliveryMode, "subscribe: group %q has only callback subscriptions: the sidecar calls the app's Handle for them, so no stream is needed", st.GetGroup()))
		}
	}
	maxInFlight := 0
	for _, t := range topics {
		mode, ok := g.Subscribes(t)
		if !ok {
			return nil, nil, 0, apierr.ToStatus(apierr.New(apierr.UnknownSubscription, "subscribe: group %q does not subscribe to topic %q: add {topic: %s, group: %s} to spoold's subscriptions", st.GetGroup(), t, t, st.GetGroup()))
		}
		if mode != ModeStream {
			return nil, nil, 0, apierr.ToStatus(apierr.New(apierr.WrongDeliveryMode, "subscribe: group %q receives topic %q by callback (delivery: callback): set delivery: stream to consume it over Subscribe", st.GetGroup(), t))
		}
		// max_in_flight is per partition: a stream may hold that many from
		// each partition of each of its topics.
		sc, _ := g.Subscription(t)
		maxInFlight += sc.Tracker.MaxInFlight * g.partitions(t)
	}
	if n := int(st.GetMaxInFlight()); n > 0 && n < maxInFlight {
		maxInFlight = n
	}
	return g, topics, maxInFlight, nil
}

var errStopped = errors.New("group stopped")

func (g *Group) String() string { return fmt.Sprintf("group %q", g.cfg.Name) }
