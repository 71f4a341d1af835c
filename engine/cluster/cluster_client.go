package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Storage-off nodes (ClusterConfig.StorageOff): no raft, no replicas; the
// controller's state comes from a member's Metadata every
// metadataInterval, and the committed ends of watched partitions from
// their replicas (remoteWaits: one call per partition waiting up to
// remoteWaitMax for the end to move; the set of partitions is checked
// every remotePollInterval, and a replica that answers at once without
// news is asked again after it).
const (
	metadataInterval   = time.Second
	remotePollInterval = 200 * time.Millisecond
	remoteWaitMax      = 2 * time.Second
)

// storageOff is the role of a storage-off node (ClusterConfig.StorageOff):
// not a member, no raft host or transport, no replicas. It learns the
// controller's state from the members (runClient), publishes through the
// partitions' leaders and reads from their replicas, and refuses the
// operators' calls that only a member can make.
type storageOff struct {
	*Node
	// stateSum names the controller state this node holds
	// (MetadataResponse.state_sum): refreshMetadata sends it, and a
	// member answers unchanged without the state when it is the same.
	// Owned by runClient's goroutine.
	stateSum []byte
}

// run keeps the node's view of the cluster current until ctx ends.
func (c *storageOff) run(ctx context.Context) error { return c.runClient(ctx) }

func (c *storageOff) whyNotReady() error {
	return fmt.Errorf("no member in cluster.join %v has answered with the cluster's state", c.cfg.Join)
}

// status: a storage-off node holds no replica of any group.
func (c *storageOff) status(uint64) (raft.GroupStatus, bool) { return raft.GroupStatus{}, false }

// replicaStopped: a storage-off node holds no replica.
func (c *storageOff) replicaStopped(uint64) bool { return false }

func (c *storageOff) placementKnown() bool { return true }

// proposeWith is never reached (status never finds a leader here): it
// answers that this node leads nothing.
func (c *storageOff) proposeWith(group uint64, _ []byte, _ raft.ProposeOptions, done func(raft.Proposed, error)) {
	done(raft.Proposed{}, &raft.NotLeaderError{Group: group})
}

// readIndex: a storage-off node leads nothing.
func (c *storageOff) readIndex(group uint64, done func(raft.Proposed, error)) {
	done(raft.Proposed{}, &raft.NotLeaderError{Group: group})
}

// controllerHolders: a storage-off node asks the controller's voters.
func (c *storageOff) controllerHolders() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	voters, _ := meta.ControllerMembers(c.state)
	return voters
}

// awaitResult: a storage-off node does not apply the controller's log: the
// command's effect shows in the state it polls (see ensureTopic).
func (c *storageOff) awaitResult(context.Context, meta.Command, int64) (meta.Result, error) {
	return meta.Result{}, nil
}

// awaitGroupsTopic: a storage-off node learns the topic from its next
// metadata poll.
func (c *storageOff) awaitGroupsTopic(context.Context) error {
	return fmt.Errorf("%w: the consumer groups' topic %s is being created; try again in a second", engine.ErrNotPlaced, meta.GroupsTopic)
}

// A storage-off node has no raft transport and no replicas: placement
// never asks it to open, stop or drop one (no partition has a replica on
// node 0).
func (c *storageOff) addPeer(uint64, string) {}
func (c *storageOff) removePeer(uint64)      {}
func (c *storageOff) replicaOps() replicaOps { return replicaOps{} }

// clusterStatus: the members and the cluster version, nothing of raft
// (nor what the members advertise: a storage-off node has no peer streams).
func (c *storageOff) clusterStatus(out engine.ClusterStatus) engine.ClusterStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out.ClusterVersion, out.ClusterVersionAvailable = c.state.ClusterVersion(), c.state.ClusterVersion()
	for _, nd := range c.state.Nodes() {
		out.Members = append(out.Members, engine.ClusterMember{ID: nd.ID, Addr: nd.Addr})
	}
	return out
}

// The operators' calls only a member can make are refused, naming where to
// ask instead.

func (c *storageOff) leave(context.Context) (engine.LeaveReport, error) {
	return engine.LeaveReport{}, fmt.Errorf("%w: this sidecar is not a cluster member (a single node, or storage off): it has nothing to hand over", engine.ErrDecommissionRefused)
}

func (c *storageOff) decommission(context.Context, uint64) error {
	return fmt.Errorf("%w: this sidecar is not a cluster member (a single node, or storage off): ask a member's admin address", engine.ErrDecommissionRefused)
}

func (c *storageOff) finalize(context.Context) (engine.ClusterVersionChange, error) {
	return engine.ClusterVersionChange{}, fmt.Errorf("%w: this sidecar is not a cluster member (storage off): ask a member's admin address", engine.ErrClusterVersion)
}

func (c *storageOff) deleteTopic(name string) error {
	return fmt.Errorf("%w: deleting topic %q: this sidecar is not a cluster member (storage off): ask a member's admin address", engine.ErrDeleteUnsupported, name)
}

func (c *storageOff) operatorReady() error {
	return fmt.Errorf("%w: this sidecar is not a cluster member (a single node, or storage off): ask a member's admin address", engine.ErrMoveRefused)
}

// runRemotePoll polls, on a member, the partitions it holds no replica
// of (clusters larger than the replication factor) and those whose replica
// here stopped (pollRemote).
func (c *member) runRemotePoll(ctx context.Context) error {
	w := newRemoteWaits(c.Node)
	defer w.stop()
	t := time.NewTicker(remotePollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.sync(ctx)
		}
	}
}

// runClient keeps a storage-off node's view of the cluster current until ctx ends.
func (c *storageOff) runClient(ctx context.Context) error {
	c.peers = newPeerClients(c.conf.Log.MaxBatchBytes, c.dialCreds())
	defer c.peers.close()
	c.router = c.newRouter()
	for i, addr := range c.cfg.Join {
		c.peers.set(seedPeer(i), addr)
	}
	deadline := time.Now().Add(c.cfg.JoinTimeout)
	tick := time.NewTicker(metadataInterval)
	defer tick.Stop()
	poll := time.NewTicker(remotePollInterval)
	defer poll.Stop()
	waits := newRemoteWaits(c.Node)
	defer waits.stop()
	var lastErr error
	for {
		if err := c.refreshMetadata(ctx); err != nil {
			lastErr = err
			select {
			case <-c.ready:
			default:
				if time.Now().After(deadline) {
					err := fmt.Errorf("engine: no member of the cluster answered within %v (cluster.join %v): %w", c.cfg.JoinTimeout, c.cfg.Join, lastErr)
					c.fail(err)
					return err
				}
			}
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-poll.C:
				waits.sync(ctx)
			case <-tick.C:
				waiting = false
			}
		}
	}
}

// seedPeer names the addresses of cluster.join before their node ids are
// known (ids the controller never gives: counting down from the top).
func seedPeer(i int) uint64 { return ^uint64(0) - uint64(i) }

// refreshMetadata asks the members in turn for the controller's state and
// brings this node in line with it.
func (c *storageOff) refreshMetadata(ctx context.Context) error {
	var errs []error
	for id, addr := range c.peers.all() {
		cl, err := c.peers.client(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cl.Metadata(cctx, &clusterv1.MetadataRequest{ClusterId: c.id.ClusterID, KnownStateSum: c.stateSum})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", addr, err))
			continue
		}
		if resp.GetUnchanged() && len(c.stateSum) > 0 && bytes.Equal(resp.GetStateSum(), c.stateSum) {
			return nil // the state this node holds
		}
		st, err := meta.DecodeState(resp.GetState())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s sent a controller state this spoold cannot read (upgrade it): %w", addr, err))
			continue
		}
		if st.ClusterID() == "" || len(st.Nodes()) == 0 {
			errs = append(errs, fmt.Errorf("%s: the cluster is not initialised yet", addr))
			continue
		}
		if c.id.ClusterID == "" {
			c.mu.Lock() // awaitReady may be reading it
			c.id.ClusterID = st.ClusterID()
			c.mu.Unlock()
		}
		if st.ClusterID() != c.id.ClusterID {
			errs = append(errs, fmt.Errorf("%s belongs to cluster %s, this node to %s", addr, st.ClusterID(), c.id.ClusterID))
			continue
		}
		for _, nd := range st.Nodes() {
			c.peers.set(nd.ID, nd.Addr)
		}
		c.reconcile(st)
		c.stateSum = resp.GetStateSum() // empty from a release that does not send it: ask for the whole state
		c.mu.Lock()
		c.state = st
		close(c.changed)
		c.changed = make(chan struct{})
		select {
		case <-c.ready:
		default:
			close(c.ready)
		}
		c.mu.Unlock()
		return nil
	}
	return errors.Join(errs...)
}

// remoteParts are the partitions of watched topics this node reads from
// other replicas (it holds no replica of them, or its replica stopped:
// readsRemote): nothing pushes their commits to this node, so a waiter
// (remoteWaits) asks a replica for each.
func (c *cluster) remoteParts() map[*partition]bool {
	c.tab.Mu.RLock()
	defer c.tab.Mu.RUnlock()
	parts := map[*partition]bool{}
	for _, t := range c.tab.Topics {
		if !t.Watched() {
			continue
		}
		for _, p := range t.Parts {
			if p.X.raftGroup != 0 && c.readsRemote(p) {
				parts[p] = true
			}
		}
	}
	return parts
}

// Metadata answers a storage-off node (or a member checking its strays) with
// the state this member applied, once it applied every command committed
// when asked.
func (s *nodeService) Metadata(ctx context.Context, req *clusterv1.MetadataRequest) (*clusterv1.MetadataResponse, error) {
	c := s.c
	st, ok := c.appliedState(ctx)
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "this node has not applied the cluster's committed state yet (%v); ask again, or another member", ctx.Err())
	}
	b, sum, err := c.served.encoded(st)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(req.GetKnownStateSum(), sum) {
		return &clusterv1.MetadataResponse{ClusterId: c.id.ClusterID, Unchanged: true, StateSum: sum}, nil
	}
	c.metadataStatesServed.Add(1)
	return &clusterv1.MetadataResponse{ClusterId: c.id.ClusterID, State: b, StateSum: sum}, nil
}

// servedState is the encoding of the last controller state a member sent
// to a node asking for it (Metadata), and its sum: a state is encoded once
// however many storage-off nodes ask for it.
type servedState struct {
	mu  sync.Mutex
	st  *meta.State // the applied state b encodes (states are replaced, never changed)
	b   []byte
	sum []byte
}

// encoded is st's encoding without join tokens (they admit members
// again) and its SHA-256.
func (s *servedState) encoded(st *meta.State) (b, sum []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == st {
		return s.b, s.sum, nil
	}
	if b, err = meta.EncodeState(st.WithoutTokens()); err != nil {
		return nil, nil, err
	}
	h := sha256.Sum256(b)
	s.st, s.b, s.sum = st, b, h[:]
	return s.b, s.sum, nil
}

// removedByPeers asks the peers for the cluster's state (the first that
// answers decides) and reports whether it no longer has this node: a node
// id below the next one that is not a member was removed. Best effort: no
// answer (peers down) is not a removal. It also returns an error
// (engine.ErrClusterVersion) when the cluster is at a version this node's
// release does not speak: the peers refuse its raft streams
// (acceptPeer), so its own log would never tell it.
func (c *member) removedByPeers(ctx context.Context) (bool, error) {
	for id := range c.peers.all() {
		if id == c.id.NodeID {
			continue
		}
		cl, err := c.peers.client(id)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.Metadata(cctx, &clusterv1.MetadataRequest{ClusterId: c.id.ClusterID})
		cancel()
		if err != nil {
			continue
		}
		st, err := meta.DecodeState(resp.GetState())
		if err == nil && st.ClusterID() == c.id.ClusterID {
			err = meta.CheckSpeaks(st.ClusterVersion(), c.cfg.ClusterVersions)
		}
		if errors.Is(err, meta.ErrVersion) {
			return false, fmt.Errorf("engine: node %d stops (%w): %s", c.id.NodeID, engine.ErrClusterVersion, versionText(err))
		}
		if err != nil || st.ClusterID() != c.id.ClusterID {
			continue
		}
		_, known := st.Node(c.id.NodeID)
		return !known && c.id.NodeID < st.NextNodeID(), nil
	}
	return false, nil
}
