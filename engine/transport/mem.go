package transport

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Network is the transport's in-memory twin, for tests of the raft layer:
// endpoints (one per node) implement Transport, and the network between them
// loses, delays, duplicates, reorders and partitions messages as told.
//
// It is deterministic: time is virtual (Advance moves it and delivers what
// is due, on the caller's goroutine, in order of due time then send order)
// and every random choice comes from one generator seeded by NewNetwork. The
// same seed and the same calls in the same order give the same deliveries.
// Messages are copied (encoded and decoded) on Send, so nodes share no
// memory, as over a real network.
type Network struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	now     time.Duration
	seq     uint64
	flights flightHeap
	nodes   map[uint64]*Endpoint
	faults  Faults
	cut     map[link]bool
}

// Faults are what the network does to every message that crosses an uncut
// link. The zero value delivers each message once, in order, at once.
type Faults struct {
	// Drop is the probability that a message is lost.
	Drop float64
	// Duplicate is the probability that a message is delivered twice (the
	// copy with its own delay).
	Duplicate float64
	// Delay is added to every message.
	Delay time.Duration
	// Jitter adds a random delay in [0, Jitter) to each message: later
	// messages overtake earlier ones (reordering). Zero keeps each link's
	// order.
	Jitter time.Duration
}

type link struct{ from, to uint64 }

// ErrCut is the failure the twin reports for a snapshot that was lost to a
// partition or to Faults.Drop.
var ErrCut = errors.New("transport (in-memory twin): snapshot lost in the network")

// NewNetwork returns a network whose random choices come from seed.
func NewNetwork(seed uint64) *Network {
	return &Network{
		rnd:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes: make(map[uint64]*Endpoint),
		cut:   make(map[link]bool),
	}
}

// Endpoint returns node id's transport, delivering to h. Calling it again
// for the same id (a restarted node) keeps the endpoint's peers and
// counters and delivers what is in flight to the new handler.
func (n *Network) Endpoint(id uint64, h Handler) *Endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.nodes[id]
	if e == nil {
		e = &Endpoint{net: n, id: id, peers: make(map[uint64]bool)}
		n.nodes[id] = e
	}
	e.handler = h
	return e
}

// Remove takes node id off the network: what is in flight to it is lost.
func (n *Network) Remove(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.nodes, id)
}

// SetFaults sets what happens to messages sent from now on.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// Cut loses every message from one node to another (one direction), from
// now on and in flight.
func (n *Network) Cut(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[link{from, to}] = true
}

// Partition cuts both directions between every node of a and every node of b.
func (n *Network) Partition(a, b []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.cut[link{x, y}] = true
			n.cut[link{y, x}] = true
		}
	}
}

// Heal restores every link.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// HealLink restores one direction.
func (n *Network) HealLink(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, link{from, to})
}

// Now is the network's virtual time.
func (n *Network) Now() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.now
}

// InFlight is the number of messages (and snapshot reports) not yet delivered.
func (n *Network) InFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.flights)
}

// Advance moves virtual time by d and delivers, on the caller's goroutine,
// everything due by then, including what handlers send meanwhile that is
// due. It returns how many deliveries it made. Advance(0) delivers what is
// due now.
func (n *Network) Advance(d time.Duration) int {
	n.mu.Lock()
	n.now += d
	n.mu.Unlock()
	delivered := 0
	for {
		n.mu.Lock()
		if len(n.flights) == 0 || n.flights[0].due > n.now {
			n.mu.Unlock()
			return delivered
		}
		f := heap.Pop(&n.flights).(*flight)
		to, from := n.nodes[NodeOf(f.m.Msg.To)], n.nodes[NodeOf(f.m.Msg.From)]
		cut := n.cut[link{NodeOf(f.m.Msg.From), NodeOf(f.m.Msg.To)}]
		var toH, fromH Handler
		if to != nil {
			toH = to.handler
		}
		if from != nil {
			fromH = from.handler
		}
		n.mu.Unlock()
		switch {
		case f.kind == flightSnapFailed:
			if from != nil {
				fromH.SnapshotDone(f.m.Group, f.m.Msg.To, ErrCut)
			}
		case to == nil || cut:
			if from != nil {
				from.c.faultCut.Add(1)
				if f.kind == flightSnap {
					fromH.SnapshotDone(f.m.Group, f.m.Msg.To, ErrCut)
				}
			}
		case f.kind == flightSnap:
			err := toH.HandleSnapshot(context.Background(), f.m)
			to.c.snapshotsReceived.Add(1)
			if from != nil {
				fromH.SnapshotDone(f.m.Group, f.m.Msg.To, err)
			}
		default:
			to.receive(toH, f.m)
		}
		delivered++
	}
}

// Flush advances time until nothing is in flight (what handlers send
// meanwhile included) and returns how many deliveries it made. With a
// network where handlers always answer, it may not end: use Advance.
func (n *Network) Flush() int {
	total := 0
	for {
		n.mu.Lock()
		if len(n.flights) == 0 {
			n.mu.Unlock()
			return total
		}
		d := n.flights[0].due - n.now
		n.mu.Unlock()
		total += n.Advance(max(d, 0))
	}
}

// send puts copies of msgs in flight, applying the faults.
func (n *Network) send(from *Endpoint, msgs []Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range msgs {
		m := msgs[i]
		kind := flightMsg
		if m.Msg.Type == raftpb.MsgSnap {
			kind = flightSnap
		}
		if !from.peers[NodeOf(m.Msg.To)] {
			from.c.droppedNoPeer.Add(1)
			if kind == flightSnap {
				n.push(Message{Group: m.Group, Msg: raftpb.Message{From: from.id, To: m.Msg.To}}, flightSnapFailed, n.now)
			}
			continue
		}
		cp, err := copyMessage(m)
		if err != nil {
			from.c.droppedTooLarge.Add(1)
			continue
		}
		from.c.messagesSent.Add(1)
		if n.cut[link{from.id, NodeOf(m.Msg.To)}] {
			from.c.faultCut.Add(1)
			if kind == flightSnap {
				n.push(cp, flightSnapFailed, n.now+n.faults.Delay)
			}
			continue
		}
		if n.faults.Drop > 0 && n.rnd.Float64() < n.faults.Drop {
			from.c.faultDropped.Add(1)
			if kind == flightSnap {
				n.push(cp, flightSnapFailed, n.now+n.faults.Delay)
			}
			continue
		}
		n.push(cp, kind, n.now+n.delay())
		if kind == flightMsg && n.faults.Duplicate > 0 && n.rnd.Float64() < n.faults.Duplicate {
			from.c.faultDuplicated.Add(1)
			dup, _ := copyMessage(m)
			n.push(dup, kind, n.now+n.delay())
		}
	}
}

func (n *Network) delay() time.Duration {
	d := n.faults.Delay
	if n.faults.Jitter > 0 {
		d += time.Duration(n.rnd.Int64N(int64(n.faults.Jitter)))
	}
	return d
}

func (n *Network) push(m Message, kind flightKind, due time.Duration) {
	n.seq++
	heap.Push(&n.flights, &flight{due: due, seq: n.seq, kind: kind, m: m})
}

func copyMessage(m Message) (Message, error) {
	b, err := m.Msg.Marshal()
	if err != nil {
		return Message{}, err
	}
	var cp raftpb.Message
	if err := cp.Unmarshal(b); err != nil {
		return Message{}, fmt.Errorf("transport twin: copying a message: %w", err)
	}
	return Message{Group: m.Group, Msg: cp}, nil
}

type flightKind uint8

const (
	flightMsg flightKind = iota
	flightSnap
	flightSnapFailed // report a lost snapshot to its sender
)

type flight struct {
	due  time.Duration
	seq  uint64
	kind flightKind
	m    Message
}

type flightHeap []*flight

func (h flightHeap) Len() int { return len(h) }
func (h flightHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h flightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)   { *h = append(*h, x.(*flight)) }
func (h *flightHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}

// Endpoint is one node's Transport on a Network.
type Endpoint struct {
	net     *Network
	id      uint64
	handler Handler // guarded by net.mu
	peers   map[uint64]bool
	c       counters
}

var _ Transport = (*Endpoint)(nil)

// Send puts copies of msgs in flight. Nothing is delivered until the
// network's Advance or Flush.
func (e *Endpoint) Send(msgs []Message) { e.net.send(e, msgs) }

// AddPeer lets this endpoint send to id; addr is ignored.
func (e *Endpoint) AddPeer(id uint64, _ string) error {
	if id == 0 || id == e.id {
		return fmt.Errorf("transport twin: AddPeer(%d): a peer id must be non-zero and not this node's own (%d)", id, e.id)
	}
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	e.peers[id] = true
	return nil
}

// RemovePeer stops this endpoint sending to id.
func (e *Endpoint) RemovePeer(id uint64) {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	delete(e.peers, id)
}

// Run starts nothing (the network delivers on Advance) and returns nil when ctx ends.
func (e *Endpoint) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Stats returns this endpoint's counters; faults are counted at the sender.
func (e *Endpoint) Stats() Stats { return e.c.stats() }

func (e *Endpoint) receive(h Handler, m Message) {
	err := h.HandleMessage(m)
	switch {
	case err == nil:
		e.c.messagesReceived.Add(1)
	case errors.Is(err, ErrUnknownGroup):
		e.c.unknownGroup.Add(1)
	default:
		e.c.handlerErrors.Add(1)
	}
}
