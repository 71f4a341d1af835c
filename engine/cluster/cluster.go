package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/internal/table"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/cluster/route"
	"github.com/spoolmq/spool/engine/internal/rsm"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/engine/transport"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// ClusterConfig makes a Node a member of a Spool cluster: its partitions
// are raft groups replicated to ReplicationFactor nodes, and group 0 (the
// controller) keeps the members, the topics and where each partition's
// replicas are (docs/replication.md).
type ClusterConfig struct {
	// Listen is where peers reach this node (host:port): raft messages,
	// joins, forwarded publishes and remote reads share this port.
	Listen string
	// Advertise is the address peers dial; default Listen. Set it when
	// Listen is a wildcard (0.0.0.0:7072).
	Advertise string
	// Join lists peers (host:port) of an existing cluster. A node with no
	// identity in its data dir asks them to admit it; with Join empty it
	// bootstraps a new cluster of one. A node that has an identity ignores
	// Join: it rejoins its own cluster.
	Join []string
	// BootstrapExpect lets nodes that all start with the same Join (the
	// pods of one Deployment, Join naming their headless Service) form the
	// cluster without one of them being told to create it: a node with no
	// identity that no candidate in Join admits, and that sees at least
	// this many candidates counting itself, every other one answering that
	// it is joining too, creates the cluster if its address is the lowest
	// of them; the others join it.
	// Set it to the number of nodes that start together (the Deployment's
	// replicas): a node that sees that many sees all of them. 0: a node
	// creates a cluster only when Join is empty.
	BootstrapExpect int
	// ReplicationFactor is the number of replicas of the partitions of a
	// topic created by this node. Default 3.
	ReplicationFactor int32
	// ProduceTimeout bounds how long Produce looks for a leader and waits
	// for a commit before failing. Default 10 s.
	ProduceTimeout time.Duration
	// JoinTimeout bounds how long a new node tries to be admitted. Default 60 s.
	JoinTimeout time.Duration
	// TickInterval is raft's tick (elections after 10 ticks, heartbeats
	// every tick). Default 100 ms; tests shorten it.
	TickInterval time.Duration
	// TLS, when set, is mutual TLS between the nodes (all three files).
	TLS ClusterTLS
	// DeadNodeTimeout is how long the controller's leader goes without
	// reaching a node before it marks the node down: its replicas are then
	// re-created on other nodes (replica moves) and it stops voting in the
	// controller. A node that comes back is marked up again and may be
	// given replicas anew. Default 5 minutes; long enough that a restart or
	// a rolling update never moves data.
	DeadNodeTimeout time.Duration
	// MoveBytesPerSecond paces the copies replica moves make: the log this
	// node, as a partition's leader, streams to the new replicas of moving
	// partitions takes at most this many bytes per second in all (the
	// producers' writes and the replication to existing replicas are not
	// paced). Default DefaultMoveBytesPerSecond; < 0: not paced.
	MoveBytesPerSecond int64
	// JoinSecret, when set, is what a node must present to be admitted
	// (cluster.join_secret_file): the same on every node. Empty: any node
	// that reaches a member may join (with TLS: any holder of a
	// certificate the peer policy accepts).
	JoinSecret []byte
	// StorageOff makes a storage-off node (cluster.storage: off): it is not a member,
	// holds no replicas, learns the cluster from the members in Join
	// (Metadata), publishes through the partitions' leaders and reads from
	// their replicas. For autoscaled stateless pods next to a few storage
	// nodes. Listen is not used.
	StorageOff bool
	// GroupsPartitions is the number of partitions of the consumer groups'
	// internal topic (coordinators) when this node's controller leader
	// creates it; fixed from then on (docs/groups.md, "Running on the
	// cluster"). Default DefaultGroupsPartitions.
	GroupsPartitions int32
	// GroupsCheckpointRecords is how many records a coordinator's log
	// takes after its last checkpoint before its leader writes the next one
	// (docs/groups.md, "Checkpoints"); the log then starts at the newest
	// checkpoint. Default DefaultGroupsCheckpointRecords.
	GroupsCheckpointRecords int
	// ReopenStoppedEvery is how often a replica of this node that stopped
	// because its disk was full is opened again from disk: once space
	// returns it runs and catches up from the leader without a restart.
	// Default DefaultReopenStoppedEvery.
	ReopenStoppedEvery time.Duration
	// AutoFinalizeAfter is how long every node must have spoken a higher
	// cluster version before the controller's leader finalizes it
	// (docs/upgrading.md): long enough to see the upgraded nodes work, and
	// to roll one back, before the old release is locked out. Default
	// DefaultAutoFinalizeAfter; < 0: only by hand (FinalizeClusterVersion).
	AutoFinalizeAfter time.Duration
	// ClusterVersions is the range of cluster versions this node
	// advertises. Default meta.Speaks() (this release's); tests set
	// another to play a node of another release.
	ClusterVersions meta.VersionRange
	// QuiesceOff keeps idle raft groups ticking (on a slow clock, one tick
	// in idleTickEvery) instead of quiescing them (cluster.quiesce: false;
	// docs/replication.md, "Quiet idle groups"). Default false: idle groups
	// quiesce, and node-level liveness wakes them.
	QuiesceOff bool
}

// Defaults of ClusterConfig.
const (
	DefaultReplicationFactor = 3
	DefaultProduceTimeout    = 10 * time.Second
	DefaultJoinTimeout       = 60 * time.Second
	DefaultDeadNodeTimeout   = 5 * time.Minute
	// DefaultAutoFinalizeAfter: a rolling upgrade's last node has run for
	// ten minutes before the old release can no longer join.
	DefaultAutoFinalizeAfter = 10 * time.Minute
	// DefaultReopenStoppedEvery: a replica stopped by a full disk runs
	// again at most 2 s after space returns; each try reads the replica's
	// state from disk once (no write while the disk is still full).
	DefaultReopenStoppedEvery = 2 * time.Second
	// DefaultMoveBytesPerSecond: 32 MiB/s, a fraction of a disk's or a
	// network link's bandwidth (CockroachDB's rebalancing snapshots
	// default to the same rate).
	DefaultMoveBytesPerSecond = 32 << 20
	// controllerPartition is group 0's log in the node's store. Topic names
	// cannot start with "__" (the sidecar refuses them), so it never clashes.
	controllerPartition = "__controller-0"
	// controllerGroup is the raft group of the controller.
	controllerGroup = 0
)

func (c *ClusterConfig) validate() error {
	if c.StorageOff {
		if len(c.Join) == 0 {
			return errors.New("engine: a node without replicas (storage off) needs cluster.join: the members it learns the cluster from")
		}
		c.Listen, c.Advertise = "", ""
		return c.validateTimes()
	}
	if c.Listen == "" {
		return errors.New("engine: cluster.listen is empty: give the host:port peers reach this node at")
	}
	if c.Advertise == "" {
		c.Advertise = c.Listen
	}
	if h, _, err := net.SplitHostPort(c.Advertise); err != nil || h == "" || h == "0.0.0.0" || h == "::" {
		return fmt.Errorf("engine: cluster advertise address %q: want the host:port peers dial (not a wildcard): set cluster.advertise", c.Advertise)
	}
	return c.validateTimes()
}

func (c *ClusterConfig) validateTimes() error {
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > meta.MaxReplicationFactor {
		return fmt.Errorf("engine: cluster.replication_factor %d: want 1 to %d", c.ReplicationFactor, meta.MaxReplicationFactor)
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = DefaultProduceTimeout
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > meta.MaxNodes {
		return fmt.Errorf("engine: cluster.bootstrap_expect %d: want 0 (off) to %d", c.BootstrapExpect, meta.MaxNodes)
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if c.TickInterval == 0 {
		c.TickInterval = raft.TickInterval
	}
	if c.DeadNodeTimeout == 0 {
		c.DeadNodeTimeout = DefaultDeadNodeTimeout
	}
	if c.MoveBytesPerSecond == 0 {
		c.MoveBytesPerSecond = DefaultMoveBytesPerSecond
	}
	if c.ReopenStoppedEvery == 0 {
		c.ReopenStoppedEvery = DefaultReopenStoppedEvery
	}
	if c.AutoFinalizeAfter == 0 {
		c.AutoFinalizeAfter = DefaultAutoFinalizeAfter
	}
	if c.ClusterVersions == (meta.VersionRange{}) {
		c.ClusterVersions = meta.Speaks()
	}
	if c.ClusterVersions.Min < 1 || c.ClusterVersions.Min > c.ClusterVersions.Max {
		return fmt.Errorf("engine: cluster versions %s: want min..max with 1 <= min <= max", c.ClusterVersions)
	}
	if c.GroupsPartitions == 0 {
		c.GroupsPartitions = DefaultGroupsPartitions
	}
	if c.GroupsCheckpointRecords == 0 {
		c.GroupsCheckpointRecords = DefaultGroupsCheckpointRecords
	}
	if c.GroupsCheckpointRecords < 1 {
		return fmt.Errorf("engine: cluster groups checkpoint records %d: want 1 or more", c.GroupsCheckpointRecords)
	}
	if c.GroupsPartitions < 1 || c.GroupsPartitions > meta.MaxPartitions {
		return fmt.Errorf("engine: cluster groups partitions %d: want 1 to %d", c.GroupsPartitions, meta.MaxPartitions)
	}
	if c.ProduceTimeout < 0 || c.JoinTimeout < 0 || c.TickInterval < 0 || c.DeadNodeTimeout < 0 || c.ReopenStoppedEvery < 0 {
		return errors.New("engine: cluster timeouts must be positive")
	}
	return nil
}

// Node is a sidecar's node of a Spool cluster: what every node has — its
// log store and topic table, its identity, the peers and the router to
// groups' leaders, the controller's state as it last saw it, the
// consumer-group coordinators' API — and its role, chosen once by Open:
// a member (*member: raft, replicas, the controller's log) or a storage-off
// node (*storageOff: no log of its own beside the controller's view; it
// polls that view from members and publishes and reads through them).
type Node struct {
	conf   Config // the node's configuration; cfg is its Cluster, validated
	store  *log.Store
	groups *groups.Store
	tab    *table.Table[part]
	// quarantines counts the partitions quarantined by a read (the table's
	// hook): the chores look for damaged replicas again (chores.go).
	quarantines atomic.Uint64

	cfg    ClusterConfig
	fs     log.FS
	dir    string // DataDir/cluster
	logger interface {
		Info(string, ...any)
		Warn(string, ...any)
		Error(string, ...any)
	}

	id  identity
	tls *tlsFiles // nil: plaintext between nodes

	// role is what this node does as a member or as a storage-off node
	// (role.go); set by Open, never changed.
	role role

	peers  *peerClients
	router *route.Router // runs calls at a raft group's leader; set by run once the node has its id
	coord  *coordinators // consumer-group coordinators (groups_cluster.go)

	// producersEvicted counts the producers evicted from this node's
	// partitions' producer tables (maxProducers).
	producersEvicted atomic.Uint64

	mu       sync.Mutex // guards the fields below (and member's: see there); never held while calling out
	state    *meta.State
	changed  chan struct{} // closed and replaced after each change of state
	ready    chan struct{} // closed once this node is a member with a known state
	readyErr error         // why the node could not start, set before ready is closed
}

// cluster is the name the cluster's own methods give a Node.
type cluster = Node

// init prepares the cluster side of a Node that Open made, choosing its
// role once from the configuration; Run starts it.
func (c *cluster) init(cfg ClusterConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if c.conf.Log.Fsync != log.FsyncAlways && !cfg.StorageOff {
		return errors.New("engine: a cluster node needs storage.fsync: always (a replica acknowledges only what is on disk)")
	}
	c.cfg = cfg
	c.fs = c.conf.Log.FS
	c.dir = filepath.Join(c.conf.DataDir, "cluster")
	c.logger = c.conf.Logger
	c.state, c.changed, c.ready = meta.NewState(), make(chan struct{}), make(chan struct{})
	c.coord = newCoordinators(c)
	if cfg.TLS.Enabled() {
		var err error
		if c.tls, err = newTLSFiles(cfg.TLS); err != nil {
			return err
		}
	}
	if cfg.StorageOff {
		c.role = &storageOff{Node: c}
		return nil // not a member: no identity
	}
	m := newMember(c)
	c.role = m
	return m.openIdentity()
}

// createCluster makes this node the first of a new cluster.
func (c *member) createCluster() error {
	if len(c.store.Partitions()) > 0 {
		return fmt.Errorf("engine: %s holds partitions written without a cluster: a cluster node starts from an empty data dir (or run without cluster settings)", c.conf.DataDir)
	}
	c.bootstrap = true
	c.mu.Lock() // awaitReady may be reading it
	c.id = identity{ClusterID: randomID(8), NodeID: 1, Token: randomID(16)}
	c.mu.Unlock()
	return saveIdentity(c.fs, c.dir, c.id)
}

// run joins (when needed), starts the transport, the replicas and the
// controller, and serves until ctx ends.
func (c *member) run(ctx context.Context) error {
	c.peers = newPeerClients(c.conf.Log.MaxBatchBytes, c.dialCreds())
	defer c.peers.close()
	l, err := c.listenAndJoin(ctx)
	if err == nil {
		err = c.start(l)
	}
	if err != nil {
		c.fail(err)
		return err
	}
	// What this node already knows of the cluster (its committed controller
	// log) places its replicas before the first election.
	if err := c.applyController(); errors.Is(err, engine.ErrClusterVersion) {
		c.fail(err)
		return err
	}
	return c.serve(ctx)
}

// listenAndJoin takes the cluster port and, for a node with no identity
// yet, joins the cluster (or creates it) first.
func (c *member) listenAndJoin(ctx context.Context) (net.Listener, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", c.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("engine: cluster listener %s: %w", c.cfg.Listen, err)
	}
	if c.id.NodeID != 0 {
		return l, nil
	}
	// While it joins, the node answers other joining nodes that it is
	// forming too (cluster.bootstrap_expect counts on that answer), then
	// gives the port to the transport.
	stopForming := serveForming(l, c.serverCreds(), c.cfg.Advertise)
	nodes, err := c.join(ctx)
	stopForming()
	if errors.Is(err, errCreateCluster) {
		err = c.createCluster()
	}
	if err != nil {
		return nil, err
	}
	if l, err = lc.Listen(ctx, "tcp", c.cfg.Listen); err != nil {
		return nil, fmt.Errorf("engine: cluster listener %s, after joining: %w", c.cfg.Listen, err)
	}
	for _, nd := range nodes {
		c.peers.set(nd.GetId(), nd.GetAddr())
	}
	return l, nil
}

// start makes the node's raft host, opens the controller's log and its
// applier, starts serving peers on l and opens the controller's replica.
// It closes l when it fails.
func (c *member) start(l net.Listener) (err error) {
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	c.router = c.newRouter()
	var tr atomic.Pointer[transport.GRPC] // set once the transport exists
	c.host, err = raft.NewHost(raft.HostConfig{
		NodeID: c.id.NodeID,
		Send: func(msgs []transport.Message) {
			if !c.gate.paused() {
				c.tr.Send(msgs)
			}
		},
		TickInterval:    c.cfg.TickInterval,
		ProposalTimeout: c.cfg.ProduceTimeout,
		IdleTickEvery:   idleTickEvery, // until quiescence is on (meta.Quiesce)
		Quiesce:         !c.cfg.QuiesceOff,
		QuiesceAllowed:  func() bool { return meta.Quiesce.At(c.clusterVersion.Load()) },
		NodeLive: func(node uint64) bool {
			t := tr.Load()
			return !c.gate.paused() && (t == nil || t.Live(node))
		},
		Logger: c.conf.Logger,
		// max(0, …): < 0 is "not paced", which the Host spells 0.
		CatchUpBytesPerSecond: max(0, c.cfg.MoveBytesPerSecond),
		OnStop:                c.onStop,
	})
	if err != nil {
		return err
	}
	c.started.Store(true)
	if c.ctrlP, err = c.store.Partition(controllerPartition); err == nil {
		err = c.ctrlP.SetRetention(0, 0) // the controller's log is kept whole
	}
	if err != nil {
		return fmt.Errorf("engine: open the controller's log: %w", err)
	}
	// Before the transport: its NodeService answers Metadata from it.
	c.ctrl = rsm.New(rsm.Config{Name: "the controller's log (" + controllerPartition + ")", MaxResults: maxRecentResults, Logger: c.logger},
		c.ctrlP, controllerMachine{c})
	c.tr, err = transport.NewGRPC(transport.GRPCConfig{
		ClusterID:   c.id.ClusterID,
		NodeID:      c.id.NodeID,
		Handler:     pausable{c.host, &c.gate},
		Mute:        c.gate.paused,
		Listener:    l,
		Logger:      c.conf.Logger,
		Advertise:   c.advertised(),
		AcceptPeer:  c.acceptPeer,
		Authorize:   c.authorizeRaftStream,
		DialOptions: []grpc.DialOption{c.dialCreds()},
		ServerOptions: append(c.serverCreds(), grpc.ChainUnaryInterceptor(route.ClusterCheck(
			func() string { return c.id.ClusterID }, clusterv1.NodeService_Metadata_FullMethodName), c.gate.hold)),
		Register: func(s *grpc.Server) {
			clusterv1.RegisterNodeServiceServer(s, &nodeService{c: c})
		},
	})
	if err != nil {
		return err
	}
	tr.Store(c.tr)
	c.gate.deaf = func() {
		for id := range c.peers.all() {
			if id != c.id.NodeID {
				c.host.PeerUnreachable(id)
			}
		}
	}
	for id, addr := range c.peers.all() {
		if id != c.id.NodeID {
			_ = c.tr.AddPeer(id, addr)
		}
	}
	return c.openController()
}

// openController adds the controller's replica (group 0) to the host: at
// start, and again after it stopped (reopenStopped).
func (c *member) openController() error {
	var voters []uint64
	if c.bootstrap {
		voters = []uint64{c.id.NodeID}
	}
	if err := c.host.Add(controllerGroup, raft.ReplicaConfig{
		Partition:     c.ctrlP,
		FS:            c.fs,
		Dir:           c.groupDir(controllerGroup),
		Voters:        voters,
		Group:         raft.GroupConfig{ID: c.id.NodeID},
		MaxBatchBytes: c.conf.Log.MaxBatchBytes,
		OnCommitted:   func(end int64) { c.ctrlEnd.Store(end); c.signalController() },
	}); err != nil {
		return fmt.Errorf("engine: open the controller's replica: %w", err)
	}
	return nil
}

// serve runs the node's components until ctx ends or one fails. They run
// on their own context: when ctx ends, this node first hands the
// leadership of its groups to other replicas, so that publishes in flight
// at it complete instead of being cut. It returns the first component's
// error (errors while stopping are not a failure).
func (c *member) serve(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	for _, comp := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"transport", c.tr.Run},
		{"raft host", c.host.Run},
		{"controller", c.runController},
		{"membership", c.register},
		{"remote reads", c.runRemotePoll},
		{"groups coordinators", func(ctx context.Context) error { return c.coord.Run(ctx, c.host) }}, // groups_cluster.go
	} {
		g.Go(func() error {
			if err := comp.run(gctx); err != nil {
				return fmt.Errorf("engine: %s: %w", comp.name, err)
			}
			return nil
		})
	}
	var failed error
	select {
	case <-ctx.Done():
		c.handOff(handOffTimeout)
	case <-gctx.Done(): // a component failed (runCtx is not cancelled yet)
		failed = context.Cause(gctx)
		c.fail(failed)
	}
	cancel()
	_ = g.Wait()
	// The replicas' state files; their logs are the store's, closed by Close.
	for _, g := range c.host.Groups() {
		_ = c.host.Remove(g)
	}
	return failed
}

// newRouter is the router of this node's calls to raft groups' leaders.
func (c *cluster) newRouter() *route.Router {
	return &route.Router{Self: c.id.NodeID, Tick: c.cfg.TickInterval, ElectionTicks: raft.DefaultElectionTicks, Status: func(group uint64) (bool, uint64, bool) {
		st, ok := c.status(group)
		return st.IsLeader, st.Leader, ok
	}}
}

// idleTickEvery slows the raft clock of idle groups tenfold (Host's
// IdleTickEvery) when quiescence is off (ClusterConfig.QuiesceOff):
// 1,000 idle partitions cost a node a tenth of the ticks and heartbeats. A dead leader's followers still elect at the normal pace
// (its connection failing wakes them); behind a network partition that
// leaves connections open, an idle group elects after 10–20 s instead of
// 1–2 s.
const idleTickEvery = 10

// handOffTimeout bounds how long a stopping node waits for the leadership
// of its groups to move.
const handOffTimeout = 3 * time.Second

// handOff transfers the leadership of every group this node leads to
// another voter and waits (up to d) until it leads none: a stopping leader
// would otherwise cut the publishes in flight at it (their outcome then
// unknown to the producers), and its groups would wait an election
// timeout for a new leader. A transfer to a replica that is down fails
// after an election timeout; the group then elects as after a crash.
func (c *member) handOff(d time.Duration) {
	deadline := time.Now().Add(d)
	orders := c.leaderOrders()
	for round := 0; time.Now().Before(deadline); round++ {
		led := 0
		for _, g := range c.host.Groups() {
			st, ok := c.host.Status(g)
			if !ok || !st.IsLeader {
				continue
			}
			// Rotated by group and every 10 rounds: a transfer to a replica
			// that turned out to be down goes to the next one.
			to, ok := c.nextLeader(st, orders[g], true, int(g)+round/10)
			if !ok {
				continue // the only voter: nobody to hand it to
			}
			led++
			if round%10 == 0 { // ask again every 10 rounds (a transfer may have aborted)
				_ = c.host.TransferLeadership(g, to)
			}
		}
		if led == 0 {
			return
		}
		time.Sleep(c.cfg.TickInterval) // sleep-ok: polling raft status while stopping
	}
	c.logger.Warn("spool cluster: stopping while still leading some groups (their replicas elect a new leader)")
}

// leaderOrders are the placement orders of the groups this node holds a
// replica of (meta.LeaderMove.Order): a move's target, then the replicas.
func (c *member) leaderOrders() map[uint64][]uint64 {
	c.mu.Lock()
	held := c.state.PartitionsOf(c.id.NodeID)
	c.mu.Unlock()
	orders := make(map[uint64][]uint64, len(held))
	for _, a := range held {
		orders[a.Group] = append(slices.Clone(a.Target), a.Replicas...)
	}
	return orders
}

// nextLeader is where the leadership of a group this node leads goes
// (meta.LeaderMove: the one leader-transfer policy), given its placement
// order; a leaving or down node is given none.
func (c *member) nextLeader(st raft.GroupStatus, order []uint64, away bool, attempt int) (uint64, bool) {
	voters := make([]uint64, len(st.Voters))
	for i, v := range st.Voters {
		voters[i] = transport.NodeOf(v)
	}
	return meta.LeaderMove{Self: c.id.NodeID, Order: order, Voters: voters, Away: away, Excluded: c.leavingNode, Attempt: attempt}.Next()
}

func (c *cluster) groupDir(group uint64) string {
	return filepath.Join(c.conf.DataDir, "raft", strconv.FormatUint(group, 10))
}

// dialCreds are the credentials of every connection to a peer.
func (c *cluster) dialCreds() grpc.DialOption {
	if c.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(c.tls.clientConfig()))
}

// serverCreds are the cluster listener's.
func (c *cluster) serverCreds() []grpc.ServerOption {
	if c.tls == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(c.tls.serverConfig()))}
}

// fail records why the node cannot serve and releases everyone waiting for
// it to be ready.
func (c *cluster) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.ready:
		return
	default:
	}
	c.readyErr = err
	close(c.ready)
}

// awaitReady waits until this node is a member of the cluster with a known
// state, or d passes.
func (c *cluster) awaitReady(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.ready:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.readyErr
	case <-t.C:
		c.mu.Lock() // a join may be writing the identity
		id := c.id
		c.mu.Unlock()
		return fmt.Errorf("engine: node %d is not a working member of cluster %s after %v: %w", id.NodeID, id.ClusterID, d, c.role.whyNotReady())
	}
}

// reconcile makes this node match the controller's state: a connection to
// every member, every topic known, a replica of every partition placed here.
func (c *cluster) reconcile(st *meta.State) {
	for id := range c.peers.all() {
		if _, ok := st.Node(id); !ok && id < st.NextNodeID() { // removed
			c.peers.remove(id)
			c.role.removePeer(id)
		}
	}
	for _, nd := range st.Nodes() {
		if nd.ID == c.id.NodeID {
			continue
		}
		if c.peers.set(nd.ID, nd.Addr) {
			c.role.addPeer(nd.ID, nd.Addr)
		}
	}
	ops := c.role.replicaOps()
	for _, t := range st.Topics() {
		c.placeTopic(t, c.id.NodeID, ops)
	}
}

// errAlreadyApplied: a command the state refused because it is already in
// effect (Init of this cluster).
var errAlreadyApplied = errors.New("already applied")

// proposeMeta puts a command in the controller's log (through its leader)
// and returns its result once this node has applied it (a member; a
// storage-off node applies nothing and returns once it is committed).
func (c *cluster) proposeMeta(ctx context.Context, cmd meta.Command) (meta.Result, error) {
	b, err := meta.EncodeCommand(cmd)
	if err == nil {
		// Validated before it is proposed: what every node will decode.
		_, err = controllerMachine{}.Decode(b)
	}
	if err != nil {
		return meta.Result{}, fmt.Errorf("engine: controller command refused before it was proposed: %w", err)
	}
	data := log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: b}}, time.Now().UnixMilli())
	// Committing takes up to ProduceTimeout; applying a command here can
	// take longer (a topic of thousands of partitions opens as many
	// replicas), up to JoinTimeout.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, c.cfg.ProduceTimeout)
	defer pcancel()
	base, err := c.produceAtLeader(pctx, controllerGroup, "", 0, c.role.controllerHolders(), data, engine.AcksAll)
	if err != nil {
		return meta.Result{}, fmt.Errorf("engine: controller command: %w", err)
	}
	return c.role.awaitResult(ctx, cmd, base)
}

func (c *cluster) stateNextNodeID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.NextNodeID()
}

func (c *cluster) stateClusterID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.ClusterID()
}

// awaitState waits until cond holds on the controller's state, or ctx ends.
func (c *cluster) awaitState(ctx context.Context, cond func(*meta.State) bool) error {
	for {
		c.mu.Lock()
		ok, ch := cond(c.state), c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ensureTopic records a topic in the controller (idempotent) and waits
// until this node knows it.
func (c *cluster) ensureTopic(spec engine.TopicSpec) error {
	if err := c.awaitReady(c.cfg.JoinTimeout); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.JoinTimeout)
	defer cancel()
	ms := meta.TopicSpec{Name: spec.Name, Partitions: spec.Partitions, ReplicationFactor: c.cfg.ReplicationFactor,
		RetentionAgeMs: spec.RetentionAge.Milliseconds(), RetentionBytes: spec.RetentionBytes}
	c.mu.Lock()
	t, known := c.state.Topic(spec.Name)
	c.mu.Unlock()
	if known {
		ms.ReplicationFactor = t.Spec.ReplicationFactor // set at creation; changing it is a replica move
	}
	if !known || t.Spec != ms {
		if _, err := c.proposeMeta(ctx, meta.Command{CreateTopic: &meta.CreateTopic{Spec: ms}}); err != nil {
			var tc *meta.TopicConflictError
			if errors.As(err, &tc) {
				return &engine.TopicConflictError{Topic: spec.Name, Stored: tc.Existing.Partitions, Declared: spec.Partitions}
			}
			return err
		}
	}
	if err := c.awaitState(ctx, func(s *meta.State) bool { _, ok := s.Topic(spec.Name); return ok }); err != nil {
		return fmt.Errorf("engine: topic %q was created but this node has not seen it: %w", spec.Name, err)
	}
	c.mu.Lock()
	t, _ = c.state.Topic(spec.Name)
	c.mu.Unlock()
	if t.Spec.Partitions != spec.Partitions {
		return &engine.TopicConflictError{Topic: spec.Name, Stored: t.Spec.Partitions, Declared: spec.Partitions}
	}
	c.tab.Mu.RLock()
	_, ok := c.tab.Topics[spec.Name]
	c.tab.Mu.RUnlock()
	if !ok {
		return fmt.Errorf("engine: topic %q is in the controller but not open here: see the log for why", spec.Name)
	}
	return nil
}

// confState is the membership in a group status.
func confState(st raft.GroupStatus) raftpb.ConfState {
	return raftpb.ConfState{Voters: slices.Clone(st.Voters), Learners: slices.Clone(st.Learners)}
}
