package cluster

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Who may do what among the nodes (docs/security.md, "Peers"). With
// cluster TLS every connection's peer holds a certificate the policy
// accepts (cluster_tls.go); these checks tell members from other holders
// (storage-off nodes, a node not admitted yet) and a node from one that
// claims its id. Without TLS there is no identity to check: the network is
// the boundary, and only the join secret and the commands' own checks
// apply.

// errNotThatNode: a peer claims a node id whose recorded identity its
// certificate does not carry.
var errNotThatNode = errors.New("the peer's certificate is not the one recorded for that node")

// peerIdentity is the TLS identity of a call's or stream's peer; ok is
// false without cluster TLS.
func (c *cluster) peerIdentity(ctx context.Context) (id string, ok bool, err error) {
	if c.tls == nil {
		return "", false, nil
	}
	return c.tls.peerPolicy().FromContext(ctx)
}

// selfIdentity is this node's own identity (empty without TLS).
func (c *cluster) selfIdentity() string {
	if c.tls == nil {
		return ""
	}
	cert, _ := c.tls.current()
	id, _ := c.tls.peerPolicy().Identity(cert.Leaf)
	return id
}

// authorizeStream is the transport's Authorize: a raft stream claiming
// node id must come from the certificate identity the controller recorded
// for that node. A node this one does not know yet (admitted by a leader
// whose decision has not reached it) is taken on its certificate alone:
// it cannot be told from a future member, and raft ignores messages from
// replicas outside a group's configuration.
func (c *cluster) authorizeStream(ctx context.Context, node uint64) error {
	id, ok, err := c.peerIdentity(ctx)
	if !ok || err != nil {
		return err
	}
	c.mu.Lock()
	nd, known := c.state.Node(node)
	c.mu.Unlock()
	if known && nd.Identity != "" && nd.Identity != id {
		return fmt.Errorf("%w: node %d is %s, the peer is %s", errNotThatNode, node, nd.Identity, id)
	}
	return nil
}

// errNotAMember: a peer claims a node id the controller's state does not
// hold.
var errNotAMember = errors.New("the peer claims a node id that is no member's")

// authorizeRaftStream is the transport's Authorize: authorizeStream, and a
// node id this node does not know is refused while this node's controller
// follows a leader it knows. A certificate with no member's identity (a
// storage-off node's) would otherwise be taken as any new node id and
// could raise group 0's term or move a follower's commit index. A node
// admitted a moment ago is refused until this node applies its admission,
// which comes from that leader (the new node's transport tries again);
// a node whose controller has no leader, or one it does not know (it is
// behind, and the new node may lead now), takes the stream on the
// certificate alone, as it must hear from that leader to catch up.
func (c *member) authorizeRaftStream(ctx context.Context, node uint64) error {
	if err := c.authorizeStream(ctx, node); err != nil {
		return err
	}
	if _, ok, _ := c.peerIdentity(ctx); !ok {
		return nil
	}
	st, _ := c.host.Status(controllerGroup)
	leader := transport.NodeOf(st.Leader)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, known := c.state.Node(node); known || leader == 0 {
		return nil
	}
	if _, known := c.state.Node(leader); !known {
		return nil
	}
	for _, nd := range c.state.Nodes() {
		if nd.Identity != "" { // a cluster whose nodes have identities
			return fmt.Errorf("%w: node %d is unknown here, and this node follows the controller's leader, node %d, which admits nodes", errNotAMember, node, leader)
		}
	}
	return nil
}

// callerIsMember reports whether a NodeService call comes from a member:
// its certificate's identity is one the controller recorded for a node
// (without TLS, every caller is taken for one). In a cluster whose nodes
// joined before they had identities, any certificate the policy accepts.
func (c *cluster) callerIsMember(ctx context.Context) (bool, error) {
	id, ok, err := c.peerIdentity(ctx)
	if !ok || err != nil {
		return !ok, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	recorded := false
	for _, nd := range c.state.Nodes() {
		if nd.Identity == id {
			return true, nil
		}
		recorded = recorded || nd.Identity != ""
	}
	return !recorded, nil
}

// checkControllerProduce is what a controller leader checks of a command a
// peer asks it to propose: one record holding a command this release
// decodes and that is valid, from a member; a node that is not one (a
// storage-off node) may only create topics. What reaches group 0's log
// otherwise is skipped by every node's applier, but need not get there.
func (c *cluster) checkControllerProduce(ctx context.Context, data []byte) error {
	recs, err := log.RecordsOf(data, c.conf.Log.MaxBatchBytes, nil)
	if err != nil || len(recs) != 1 {
		return fmt.Errorf("a controller proposal is one record (%d here): %v", len(recs), err)
	}
	cmd, err := decodeControllerCommand(recs[0].Value)
	if err != nil {
		return fmt.Errorf("the record is no command of this log: %w", err)
	}
	member, err := c.callerIsMember(ctx)
	switch {
	case err != nil:
		return err
	case !member && cmd.CreateTopic == nil:
		return errors.New("only the cluster's members change it; a node that is not one may only create topics")
	}
	return nil
}

// checkPeerProduce is what a leader checks of a peer's Produce beyond the
// records' framing: commands for the controller, no internal topics.
func (c *cluster) checkPeerProduce(ctx context.Context, group uint64, req *clusterv1.ProduceRequest) error {
	if group == controllerGroup {
		return c.checkControllerProduce(ctx, req.GetRecords())
	}
	return checkTopicProduce(req.GetTopic())
}

// checkTopicProduce refuses a peer's write to an internal topic: the
// consumer groups' coordinators write their logs themselves (a peer asks
// with Coordinate, whose command the leader decodes, checks and stamps).
func checkTopicProduce(topic string) error {
	if strings.HasPrefix(topic, "__") {
		return fmt.Errorf("topic %q is internal: its records are written by the cluster itself", topic)
	}
	return nil
}

// checkCoordinate is what a coordinator's leader checks of a command a
// peer asks it to propose, beyond decoding: checkpoints are the leader's
// own; dropping a topic's groups is a member's (a topic deletion); a
// member joining on a node must be on that node (the node's recorded
// identity), as its reads prefer that node's replicas.
func (c *cluster) checkCoordinate(ctx context.Context, cmd coord.Command) error {
	switch {
	case cmd.Checkpoint != nil:
		return errors.New("checkpoints are written by the coordinator's leader itself")
	case cmd.DropTopic != nil:
		member, err := c.callerIsMember(ctx)
		if err != nil || !member {
			return fmt.Errorf("only the cluster's members drop a topic's groups (%v)", err)
		}
	case cmd.Join != nil && cmd.Join.Node != 0:
		if err := c.authorizeStream(ctx, uint64(cmd.Join.Node)); err != nil {
			return fmt.Errorf("a member joining on node %d: %w", cmd.Join.Node, err)
		}
	}
	return nil
}

// Join secrets. A node asking to join presents the secret in gRPC metadata
// (joinSecretKey); every member checks it before anything else, the first
// it asks and the controller's leader it passes the request to.
const (
	joinSecretKey = "spool-join-secret"
	// joinIdentityKey: the identity of the joining node, as the member it
	// asked read it from its certificate, passed to the controller's
	// leader with the request (taken from members only).
	joinIdentityKey = "spool-join-identity"
)

// errJoinSecret: the join secret is missing or not this cluster's.
var errJoinSecret = errors.New("the join secret is missing or wrong (cluster.join_secret_file must hold the same secret on every node)")

// checkJoinSecret compares the secret a joining node sent with this one's
// in constant time; no secret configured admits every node.
func (c *cluster) checkJoinSecret(ctx context.Context) error {
	if len(c.cfg.JoinSecret) == 0 {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(joinSecretKey)
	if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), c.cfg.JoinSecret) != 1 {
		return errJoinSecret
	}
	return nil
}

// joinerIdentity is the identity to record for a node asking to join: its
// own certificate's, or, for a request a member passed on, the one that
// member read.
func (c *cluster) joinerIdentity(ctx context.Context, forwarded bool) (string, error) {
	id, ok, err := c.peerIdentity(ctx)
	if !ok || err != nil || !forwarded {
		return id, err
	}
	if member, err := c.callerIsMember(ctx); err != nil || !member {
		return "", errors.New("a join passed on by a node that is not a member")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(joinIdentityKey); len(v) == 1 {
		return v[0], nil
	}
	return "", nil
}
