// Package route runs a call at the leader of a raft group: on this node when
// it leads the group, forwarded to the leader otherwise (the role of
// CockroachDB's DistSender). It is the one place that finds a leader,
// follows a refusal's hint, backs off between attempts and decides what may
// be tried again. Publishes and controller commands (a Produce forwarded to
// the leader) and consumer-group coordinator calls use it.
//
// # What is tried again
//
// An attempt is tried again, at the leader it names or the next node asked,
// only when nothing was done:
//   - a *raft.NotLeaderError (the node asked does not lead; it may name the
//     one that does),
//   - raft.ErrProposalLost (the proposal was dropped before it took a place
//     in the log: a leader change),
//   - ErrUnreachable (the call never left this node: see NeverSent),
//   - ErrNotReady (the leader could not act yet, and did nothing: a new
//     leader still applying its predecessors' entries).
//
// An attempt whose outcome is unknown (raft.ErrOutcomeUnknown or
// engine.ErrOutcomeUnknown: the request may have been stored) is tried again
// only when the call is idempotent (Call.Idempotent: a batch with a producer
// id, which the leader recognises); otherwise it ends the call with that
// error.
//
// An idempotent attempt at another node is given up as soon as this node's
// replica of the group knows of another leader (checked every tick while
// the attempt runs): a leader that stands still (SIGSTOP, a long pause)
// holds the call until ctx ends, while the others elect a new one within
// an election timeout. The attempt's outcome is then unknown, and the next
// goes to the new leader, which recognises the batch if the old leader had
// it replicated. A node without a replica of the group (storage off, or a
// cluster larger than the replication factor) learns of no new leader: it
// gives the attempt up once it has waited the longest election timeout
// (Router.Patience), by when the holders have campaigned, and asks a
// holder again, which names the new leader (or the same one, which is
// then asked again: a leader merely slow answers the copy with the first
// one's outcome). A non-idempotent call keeps waiting: a second copy could
// be stored. Any other error ends the call as it is. When ctx ends, the
// call fails with engine.ErrOutcomeUnknown if an attempt's outcome was
// unknown, else with engine.ErrNoLeader, each wrapping the last attempt's
// error.
package route

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/internal/backoff"
)

// ErrUnreachable: the call never left this node (no connection to the
// peer); nothing was done there.
var ErrUnreachable = errors.New("peer unreachable")

// ErrNotReady: the leader could not act yet and did nothing; worth asking
// again. Errors that mean it wrap it.
var ErrNotReady = errors.New("leader not ready")

// Router finds the leaders of this node's raft groups.
type Router struct {
	// Self is this node's id (0 on a node that holds no replicas).
	Self uint64
	// Status says whether this node leads group, and the leader it knows
	// (0: none known); ok is false when this node has no replica of it.
	Status func(group uint64) (leads bool, leader uint64, ok bool)
	// Tick is raft's tick: attempts back off from half a tick, doubling up
	// to four ticks (Backoff).
	Tick time.Duration
	// ElectionTicks is raft's election timeout in ticks (0: raft's
	// default): a follower campaigns after ElectionTicks to twice that.
	ElectionTicks int
}

// Patience is how long an idempotent attempt at another node waits when
// this node has no replica of the group to say whether a new leader was
// elected: the longest election timeout, twice ElectionTicks ticks (2 s
// with the defaults).
func (r *Router) Patience() time.Duration {
	return 2 * time.Duration(cmp.Or(r.ElectionTicks, raft.DefaultElectionTicks)) * max(r.Tick, time.Millisecond)
}

// Call is one call to run at a group's leader.
type Call struct {
	Group uint64
	// Holders are the nodes holding (or getting) a replica of the group:
	// any of them names the leader when this node knows none.
	Holders []uint64
	// Local runs the call on this node, which leads the group.
	Local func(ctx context.Context) error
	// Remote runs the call at node, which this node takes for the leader.
	Remote func(ctx context.Context, node uint64) error
	// Idempotent: an attempt whose outcome is unknown may be made again
	// (the leader recognises a second copy).
	Idempotent bool
}

// Backoff is the wait before attempt (1, 2, ...): Spool's one backoff
// formula (internal/backoff) from half a tick, doubling up to four ticks,
// each wait at least half its cap (the rest drawn at random, so that the
// nodes that lost a leader together do not ask again together).
func (r *Router) Backoff(attempt int) time.Duration {
	return backoff.Config{Base: r.Tick / 2, Max: 4 * r.Tick, Multiplier: 2, Jitter: 0.5}.Delay(attempt, rand.Float64())
}

// Do runs c at the group's leader, trying again while nothing was done
// (see the package doc) until ctx ends.
func (r *Router) Do(ctx context.Context, c Call) error {
	start := time.Now()
	var lastErr error
	maybeDone := false // an attempt's outcome was unknown
	var hint uint64
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(r.Backoff(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				if lastErr == nil {
					lastErr = ctx.Err()
				}
				took := time.Since(start).Round(time.Millisecond)
				if maybeDone { // not "no leader": an earlier attempt may have done it
					return fmt.Errorf("%w: no answer after %v: %w", engine.ErrOutcomeUnknown, took, lastErr)
				}
				return fmt.Errorf("%w after %v: %w", engine.ErrNoLeader, took, lastErr)
			case <-t.C:
			}
		}
		err := r.attempt(ctx, c, attempt, &hint)
		var nl *raft.NotLeaderError
		switch {
		case err == nil:
			return nil
		case NothingDone(err):
			lastErr = err
			if errors.As(err, &nl) {
				hint = nl.Leader
			}
		case errors.Is(err, raft.ErrOutcomeUnknown), errors.Is(err, engine.ErrOutcomeUnknown):
			if !c.Idempotent || ctx.Err() != nil {
				return err
			}
			lastErr, maybeDone = err, true
		default:
			return err
		}
	}
}

// NothingDone reports whether a failed attempt certainly did nothing, so
// that another one (at the leader) may be made: the rule of the package
// doc.
func NothingDone(err error) bool {
	var nl *raft.NotLeaderError
	return errors.As(err, &nl) || errors.Is(err, raft.ErrProposalLost) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNotReady)
}

// errNoLeaderKnown: no node to ask this attempt.
var errNoLeaderKnown = fmt.Errorf("%w: no leader known (an election may be running)", ErrNotReady)

// attempt makes one attempt: here when this node leads, else at the hinted
// leader, the known one, or a holder asked in turn (it names the leader).
func (r *Router) attempt(ctx context.Context, c Call, attempt int, hint *uint64) error {
	leader := *hint
	*hint = 0
	leads, known, ok := r.Status(c.Group)
	if ok && leads {
		return c.Local(ctx)
	}
	if leader == 0 {
		leader = known
	}
	if leader == 0 || leader == r.Self {
		if len(c.Holders) == 0 {
			return errNoLeaderKnown
		}
		leader = c.Holders[attempt%len(c.Holders)]
		if leader == r.Self {
			return errNoLeaderKnown
		}
	}
	if !c.Idempotent {
		return c.Remote(ctx, leader)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := r.watchLeader(c.Group, leader, cancel)
	err := c.Remote(actx, leader)
	stop()
	if cause := context.Cause(actx); err != nil && errors.Is(cause, errGivenUp) {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// errGivenUp: an attempt at another node given up by watchLeader.
var errGivenUp = errors.New("given up")

// errLeaderMoved: given up because another node leads now; errLeaderSilent:
// given up without a replica here to tell, after Patience.
var (
	errLeaderMoved  = fmt.Errorf("%w: another node leads the group now", errGivenUp)
	errLeaderSilent = fmt.Errorf("%w: no answer within the longest election timeout, and no replica here to learn of a new leader: asking a holder", errGivenUp)
)

// watchLeader checks every tick, until stop is called, whether this node's
// replica of group knows a leader other than asked (or leads itself), and
// then cancels with errLeaderMoved; without a replica here, it cancels with
// errLeaderSilent once Patience has passed. No goroutine runs between
// checks.
func (r *Router) watchLeader(group, asked uint64, cancel context.CancelCauseFunc) (stop func()) {
	tick := max(r.Tick, time.Millisecond)
	giveUp := time.Now().Add(r.Patience())
	var mu sync.Mutex // t and stopped
	var t *time.Timer
	stopped := false
	check := func() {
		leads, known, ok := r.Status(group)
		if ok && (leads || known != 0 && known != asked) {
			cancel(errLeaderMoved)
			return
		}
		if !ok && !time.Now().Before(giveUp) {
			cancel(errLeaderSilent)
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(tick)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(tick, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// NeverSent is gRPC's own answer to "did a failed call leave this node?":
// a call that never got a transport stream was never handed to a
// connection (grpc-go runs a grpc.Peer option's after hook only once a
// stream exists). Pass the returned option to the call; after it failed,
// sent() is false only when the request certainly never left. A call that
// got a stream may have reached the peer even if it failed at once.
func NeverSent() (opt grpc.CallOption, sent func() bool) {
	p := &peer.Peer{}
	return grpc.Peer(p), func() bool { return p.Addr != nil }
}

// Unsent wraps err of a failed call that never left this node in
// ErrUnreachable, naming node; any other failure may have reached the
// peer, and comes back as engine.ErrOutcomeUnknown.
func Unsent(node uint64, sent func() bool, err error) error {
	if !sent() {
		return fmt.Errorf("%w: node %d: %v", ErrUnreachable, node, err)
	}
	return fmt.Errorf("%w: forwarded to node %d, no answer: %v", engine.ErrOutcomeUnknown, node, err)
}

// clusterScoped is a peer request that names the cluster it is for.
type clusterScoped interface{ GetClusterId() string }

// ClusterCheck is the one check of every NodeService request that names a
// cluster (the place peer authentication goes): a request for another
// cluster is refused with FAILED_PRECONDITION, without naming this node's
// cluster. clusterID is this node's (it may change while the node joins);
// a request that names none is let through only for the methods in
// anonymous (a client node asks Metadata before it knows the id).
func ClusterCheck(clusterID func() string, anonymous ...string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(clusterScoped); ok {
			id := r.GetClusterId()
			if id != clusterID() && (id != "" || !slices.Contains(anonymous, info.FullMethod)) {
				return nil, status.Errorf(codes.FailedPrecondition, "the request is for cluster %q, which this node does not belong to", id)
			}
		}
		return handler(ctx, req)
	}
}
