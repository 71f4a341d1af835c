// Package fakesidecar is an in-process twin of the Spool sidecar's public
// gRPC API (PublisherService, SubscriberService), for the Go SDK's unit tests
// and examples. It keeps messages in memory, honours the Subscribe protocol
// (Start, Started, credit, settlements, fencing tokens, SettleError) and
// injects the faults a real sidecar cannot be made to produce on demand:
// broken streams, expired leases, deliveries beyond credit.
//
// It is not a sidecar: no durability, no ordering by key, no backoff. The
// SDK's end-to-end tests run against the real spoold. It imports only the
// generated API, never the sidecar or the engine.
package fakesidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Config sets the twin's behaviour. The zero value is usable.
type Config struct {
	// VisibilityMs is the lease granted per delivery and reported in Started
	// (default 30,000).
	VisibilityMs uint32
	// Groups, when non-empty, are the only groups a Start may name; others
	// get NOT_FOUND.
	Groups []string
	// Redeliver puts RETRY and RELEASE settlements back in the queue (a new
	// fencing token; RETRY counts an attempt). Off by default so that a
	// failing handler is called once.
	Redeliver bool
	// ExtraDeliveries makes the twin send this many deliveries beyond the
	// credit granted, once per stream (a protocol fault).
	ExtraDeliveries int
	// MaxBatch bounds the deliveries per frame (default 256).
	MaxBatch int
	// Addr is the loopback address to listen on (default: a fresh port).
	// Tests that start the twin after the client use it.
	Addr string
	// PublishError, when set, is the answer to every Publish (unary) and
	// ends every PublishStream at its first request, as a sidecar that
	// cannot store anything would (a full disk).
	PublishError error
}

type key struct {
	topic     string
	partition int32
	offset    int64
}

// Sidecar is the twin. Start it with Start, stop it with Stop.
type Sidecar struct {
	spoolv1.UnimplementedPublisherServiceServer
	spoolv1.UnimplementedSubscriberServiceServer

	cfg  Config
	srv  *grpc.Server
	lis  net.Listener
	addr string

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	queue    []*spoolv1.Delivery
	gen      *generator
	inflight map[key]*spoolv1.Delivery // delivered, unsettled, with the current token
	owner    map[key]*stream
	offsets  map[string]int64 // next offset per topic (one partition per topic)
	token    uint64
	streams  map[*stream]struct{}
	pubEnds  map[chan error]struct{} // one per open PublishStream: send to end it
	rec      Record
}

// Record is what the twin has seen, for assertions.
type Record struct {
	Starts        []*spoolv1.Start
	Frames        int
	Acks          []*spoolv1.Ack
	Nacks         []*spoolv1.Nack
	Extends       []*spoolv1.Extend
	CreditGranted uint64 // total credit over all streams
	CreditAfter   uint64 // credit granted in frames after the first of each stream
	Delivered     int
	SettleErrors  int
	// MaxOutstanding is the most deliveries unsettled on one stream at once.
	MaxOutstanding int
	StreamsEnded   int // streams the client half-closed cleanly
	Published      []*spoolv1.PublishMessage
	// PublishAcks is the acks of the request that carried each message of
	// Published.
	PublishAcks []spoolv1.Acks
}

// DefaultClientReceiveBytes is gRPC's default receive limit, assumed for a
// client whose Start has no max_receive_bytes.
const DefaultClientReceiveBytes = 4 << 20

// frameOverheadBytes is kept free in every frame for the SubscribeResponse
// and per-delivery framing.
const frameOverheadBytes = 1 << 10

type stream struct {
	maxFrameBytes int
	credit        int64
	outstanding   int
	kick          chan struct{}
	broken        chan error
	extraSent     bool
}

type generator struct {
	topic   string
	left    int
	payload []byte
}

// Start serves the twin on a fresh loopback TCP port.
func Start(cfg Config) (*Sidecar, error) {
	if cfg.VisibilityMs == 0 {
		cfg.VisibilityMs = 30000
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 256
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("fakesidecar: listen: %w", err)
	}
	s := &Sidecar{
		cfg: cfg, lis: lis, addr: lis.Addr().String(), srv: grpc.NewServer(),
		changed: make(chan struct{}), inflight: map[key]*spoolv1.Delivery{}, owner: map[key]*stream{},
		offsets: map[string]int64{}, streams: map[*stream]struct{}{}, pubEnds: map[chan error]struct{}{},
	}
	spoolv1.RegisterPublisherServiceServer(s.srv, s)
	spoolv1.RegisterSubscriberServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Addr is the address to Dial.
func (s *Sidecar) Addr() string { return s.addr }

// Stop ends every stream and the server.
func (s *Sidecar) Stop() {
	s.BreakStreams()
	s.srv.Stop()
}

// Enqueue adds messages to be delivered (one partition per topic).
func (s *Sidecar) Enqueue(topic string, payloads ...string) {
	s.mu.Lock()
	for _, p := range payloads {
		s.queue = append(s.queue, s.newDelivery(topic, []byte(p), nil, ""))
	}
	s.signalLocked()
	s.mu.Unlock()
}

// Generate makes n deliveries of payload available, built lazily (for benchmarks).
func (s *Sidecar) Generate(topic string, n int, payload []byte) {
	s.mu.Lock()
	s.gen = &generator{topic: topic, left: n, payload: payload}
	s.signalLocked()
	s.mu.Unlock()
}

func (s *Sidecar) newDelivery(topic string, payload, key []byte, id string) *spoolv1.Delivery {
	off := s.offsets[topic]
	s.offsets[topic] = off + 1
	if id == "" {
		id = fmt.Sprintf("%s-%d", topic, off)
	}
	now := time.Now().UnixMilli()
	return &spoolv1.Delivery{
		MessageId: id, Topic: topic, Offset: off, Key: key, Payload: payload,
		PublishTimeMs: now, Attempt: 0, Group: "",
	}
}

// Record returns a copy of what the twin has seen.
func (s *Sidecar) Record() Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	r.Starts = append([]*spoolv1.Start(nil), r.Starts...)
	r.Acks = append([]*spoolv1.Ack(nil), r.Acks...)
	r.Nacks = append([]*spoolv1.Nack(nil), r.Nacks...)
	r.Extends = append([]*spoolv1.Extend(nil), r.Extends...)
	r.Published = append([]*spoolv1.PublishMessage(nil), r.Published...)
	r.PublishAcks = append([]spoolv1.Acks(nil), r.PublishAcks...)
	return r
}

// Await waits until cond holds for the record, or ctx ends.
func (s *Sidecar) Await(ctx context.Context, cond func(Record) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s.Record()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("fakesidecar: condition not met: %w", ctx.Err())
		}
	}
}

// BreakStreams ends every Subscribe stream with UNAVAILABLE, as a sidecar
// restart would; their unsettled deliveries go back to the queue with a new
// fencing token.
func (s *Sidecar) BreakStreams() {
	s.mu.Lock()
	for st := range s.streams {
		select {
		case st.broken <- status.Error(codes.Unavailable, "fakesidecar: stream broken on purpose (sidecar restart)"):
		default:
		}
	}
	s.mu.Unlock()
}

// EndPublishStreams ends every open PublishStream with err (a status), as a
// sidecar that stops would; requests not yet answered get no answer.
func (s *Sidecar) EndPublishStreams(err error) {
	s.mu.Lock()
	for end := range s.pubEnds {
		select {
		case end <- err:
		default:
		}
	}
	s.mu.Unlock()
}

// ExpireLeases redelivers every unsettled delivery with a new fencing token,
// as if its lease had run out; settlements with the old token are rejected.
func (s *Sidecar) ExpireLeases() {
	s.mu.Lock()
	for k, d := range s.inflight {
		s.requeueLocked(k, d, true)
	}
	s.signalLocked()
	s.mu.Unlock()
}

func (s *Sidecar) requeueLocked(k key, d *spoolv1.Delivery, front bool) {
	if st := s.owner[k]; st != nil {
		st.outstanding--
	}
	delete(s.inflight, k)
	delete(s.owner, k)
	d = proto.Clone(d).(*spoolv1.Delivery) // the sent one is never mutated
	if front {
		s.queue = append([]*spoolv1.Delivery{d}, s.queue...)
	} else {
		s.queue = append(s.queue, d)
	}
}

func (s *Sidecar) signalLocked() {
	s.changedLocked()
	for st := range s.streams {
		select {
		case st.kick <- struct{}{}:
		default:
		}
	}
}

func (s *Sidecar) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Publish implements PublisherService.Publish.
func (s *Sidecar) Publish(_ context.Context, req *spoolv1.PublishRequest) (*spoolv1.PublishResponse, error) {
	if s.cfg.PublishError != nil {
		return nil, s.cfg.PublishError
	}
	if err := req.Validate(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &spoolv1.PublishResponse{Results: s.append(req.GetTopic(), req.GetAcks(), req.GetMessages())}, nil
}

// PublishStream implements PublisherService.PublishStream. Requests are
// read on their own goroutine so that EndPublishStreams can end the stream
// while the client is between requests.
func (s *Sidecar) PublishStream(srv grpc.BidiStreamingServer[spoolv1.PublishStreamRequest, spoolv1.PublishStreamResponse]) error {
	end := make(chan error, 1)
	s.mu.Lock()
	s.pubEnds[end] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pubEnds, end)
		s.mu.Unlock()
	}()
	reqs := make(chan *spoolv1.PublishStreamRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-srv.Context().Done():
				return
			}
		}
	}()
	for {
		var req *spoolv1.PublishStreamRequest
		select {
		case req = <-reqs:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case err := <-end:
			return err
		}
		if s.cfg.PublishError != nil {
			return s.cfg.PublishError
		}
		resp := &spoolv1.PublishStreamResponse{Sequence: req.GetSequence()}
		if err := req.Validate(); err != nil {
			resp.Error = &spoolv1.Error{Code: int32(codes.InvalidArgument), Reason: "INVALID_ARGUMENT", Message: err.Error()}
		} else {
			resp.Results = s.append(req.GetTopic(), req.GetAcks(), req.GetMessages())
		}
		if err := srv.Send(resp); err != nil {
			return err
		}
	}
}

func (s *Sidecar) append(topic string, acks spoolv1.Acks, msgs []*spoolv1.PublishMessage) []*spoolv1.PublishResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*spoolv1.PublishResult, len(msgs))
	for i, m := range msgs {
		d := s.newDelivery(topic, m.GetPayload(), m.GetKey(), m.GetId())
		d.Headers = m.GetHeaders()
		s.queue = append(s.queue, d)
		s.rec.Published = append(s.rec.Published, m)
		s.rec.PublishAcks = append(s.rec.PublishAcks, acks)
		out[i] = &spoolv1.PublishResult{Id: d.GetMessageId(), Partition: 0, Offset: d.GetOffset()}
	}
	s.signalLocked()
	return out
}

// Subscribe implements SubscriberService.Subscribe.
func (s *Sidecar) Subscribe(srv grpc.BidiStreamingServer[spoolv1.SubscribeRequest, spoolv1.SubscribeResponse]) error {
	first, err := srv.Recv()
	if err != nil {
		return err
	}
	if err := first.Validate(); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "subscribe: the first frame must carry start")
	}
	if len(s.cfg.Groups) > 0 && !contains(s.cfg.Groups, start.GetGroup()) {
		return status.Errorf(codes.NotFound, "subscribe: group %q is not declared in the sidecar's subscriptions", start.GetGroup())
	}
	// Frames stay within what the client said it can receive (gRPC's default
	// 4 MiB when it said nothing), as the sidecar does; a single delivery
	// larger than that is still sent, alone, and the client's gRPC refuses it.
	maxFrame := int(start.GetMaxReceiveBytes())
	if maxFrame == 0 {
		maxFrame = DefaultClientReceiveBytes
	}
	st := &stream{kick: make(chan struct{}, 1), broken: make(chan error, 1), maxFrameBytes: maxFrame}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.rec.Starts = append(s.rec.Starts, start)
	s.rec.Frames++
	s.rec.CreditGranted += uint64(first.GetCredit())
	st.credit = int64(first.GetCredit())
	s.signalLocked()
	s.mu.Unlock()
	defer s.endStream(st)

	if err := srv.Send(&spoolv1.SubscribeResponse{Started: &spoolv1.Started{
		Group: start.GetGroup(), Topics: start.GetTopics(), MaxInFlight: start.GetMaxInFlight(), VisibilityTimeoutMs: s.cfg.VisibilityMs,
		MaxFrameBytes: uint32(maxFrame),
	}}); err != nil {
		return err
	}

	recvDone := make(chan error, 1)
	go func() {
		for {
			req, err := srv.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			if err := req.Validate(); err != nil {
				recvDone <- status.Error(codes.InvalidArgument, err.Error())
				return
			}
			if req.GetStart() != nil {
				recvDone <- status.Error(codes.InvalidArgument, "subscribe: start is only allowed in the first frame")
				return
			}
			if errs := s.apply(st, req); len(errs) > 0 {
				if err := srv.Send(&spoolv1.SubscribeResponse{SettleErrors: errs}); err != nil {
					recvDone <- err
					return
				}
			}
		}
	}()

	for {
		s.mu.Lock()
		batch := s.takeLocked(st, start.GetGroup())
		if len(batch) > 0 {
			s.changedLocked()
		}
		s.mu.Unlock()
		if len(batch) > 0 {
			if err := srv.Send(&spoolv1.SubscribeResponse{Deliveries: batch}); err != nil {
				return err
			}
			continue
		}
		select {
		case <-st.kick:
		case err := <-st.broken:
			return err
		case err := <-recvDone:
			if errors.Is(err, io.EOF) {
				s.mu.Lock()
				s.rec.StreamsEnded++
				s.mu.Unlock()
				return nil
			}
			return err
		case <-srv.Context().Done():
			return srv.Context().Err()
		}
	}
}

// takeLocked hands out deliveries within the stream's credit.
func (s *Sidecar) takeLocked(st *stream, group string) []*spoolv1.Delivery {
	n := int(st.credit)
	if !st.extraSent && s.cfg.ExtraDeliveries > 0 && n > 0 {
		n += s.cfg.ExtraDeliveries
		st.extraSent = true
	}
	n = min(n, s.cfg.MaxBatch)
	var out []*spoolv1.Delivery
	size := frameOverheadBytes
	for len(out) < n {
		var d *spoolv1.Delivery
		switch {
		case len(s.queue) > 0:
			d = s.queue[0]
			sz := proto.Size(d) + 16
			if len(out) > 0 && size+sz > st.maxFrameBytes {
				return out // the rest goes in the next frame
			}
			size += sz
			s.queue = s.queue[1:]
		case s.gen != nil && s.gen.left > 0:
			s.gen.left--
			d = s.newDelivery(s.gen.topic, s.gen.payload, nil, "")
		default:
			return out
		}
		s.token++
		d.FencingToken = s.token
		d.Attempt++
		d.Group = group
		now := time.Now().UnixMilli()
		if d.FirstDeliveryTimeMs == 0 {
			d.FirstDeliveryTimeMs = now
		}
		d.LeaseDeadlineMs = now + int64(s.cfg.VisibilityMs)
		k := key{d.GetTopic(), d.GetPartition(), d.GetOffset()}
		s.inflight[k] = d
		s.owner[k] = st
		st.outstanding++
		if st.credit > 0 { // deliveries beyond credit (ExtraDeliveries) do not drive it negative
			st.credit--
		}
		s.rec.Delivered++
		s.rec.MaxOutstanding = max(s.rec.MaxOutstanding, st.outstanding)
		out = append(out, d)
	}
	return out
}

// apply records a client frame and settles what it names.
func (s *Sidecar) apply(st *stream, req *spoolv1.SubscribeRequest) []*spoolv1.SettleError {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signalLocked()
	s.rec.Frames++
	s.rec.CreditGranted += uint64(req.GetCredit())
	s.rec.CreditAfter += uint64(req.GetCredit())
	st.credit += int64(req.GetCredit())
	var errs []*spoolv1.SettleError
	check := func(ref *spoolv1.DeliveryRef) (key, *spoolv1.Delivery, bool) {
		k := key{ref.GetTopic(), ref.GetPartition(), ref.GetOffset()}
		d := s.inflight[k]
		switch {
		case d == nil:
			errs = append(errs, &spoolv1.SettleError{Ref: ref, Reason: "UNKNOWN_DELIVERY", Message: "no such delivery in flight"})
			return k, nil, false
		case d.GetFencingToken() != ref.GetFencingToken():
			errs = append(errs, &spoolv1.SettleError{Ref: ref, Reason: "STALE_FENCING_TOKEN", Message: "the message was redelivered since; this settlement changed nothing"})
			return k, nil, false
		}
		return k, d, true
	}
	for _, a := range req.GetAcks() {
		s.rec.Acks = append(s.rec.Acks, a)
		if k, _, ok := check(a.GetRef()); ok {
			st.outstanding--
			delete(s.inflight, k)
			delete(s.owner, k)
		}
	}
	for _, n := range req.GetNacks() {
		s.rec.Nacks = append(s.rec.Nacks, n)
		k, d, ok := check(n.GetRef())
		if !ok {
			continue
		}
		if s.cfg.Redeliver && n.GetOutcome() != spoolv1.Outcome_OUTCOME_DEAD_LETTER {
			s.requeueLocked(k, d, false)
			q := s.queue[len(s.queue)-1]
			if n.GetOutcome() == spoolv1.Outcome_OUTCOME_RELEASE {
				q.Attempt-- // a release does not count an attempt
			} else {
				q.LastError = n.GetError()
			}
			continue
		}
		st.outstanding--
		delete(s.inflight, k)
		delete(s.owner, k)
	}
	for _, e := range req.GetExtends() {
		s.rec.Extends = append(s.rec.Extends, e)
		check(e.GetRef()) // the twin keeps no lease clock; a stale extend is reported

	}
	s.rec.SettleErrors += len(errs)
	return errs
}

// endStream puts the stream's unsettled deliveries back in the queue.
func (s *Sidecar) endStream(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.streams, st)
	for k, o := range s.owner {
		if o == st {
			s.requeueLocked(k, s.inflight[k], true)
		}
	}
	s.signalLocked()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
