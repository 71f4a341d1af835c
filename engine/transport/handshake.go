package transport

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// HandshakeError is a refused handshake: the two nodes disagree on Field
// (cluster id, protocol version or node id). Local is this node's value,
// Remote the peer's. It matches ErrWrongCluster, ErrProtocolVersion or
// ErrWrongNode with errors.Is. The transport keeps retrying with backoff,
// so a fixed configuration heals without a restart.
type HandshakeError struct {
	Kind   error  // ErrWrongCluster, ErrProtocolVersion, ErrWrongNode or ErrPeerRefused
	Local  string // this node's value
	Remote string // the peer's value
	Peer   uint64 // the peer's node id as this node knows it
	Addr   string // the peer's address, when this node dialed it
	// Why is the refusing node's reason (ErrPeerRefused: AcceptPeer's error).
	Why string
}

func (e *HandshakeError) Unwrap() error { return e.Kind }

func (e *HandshakeError) Error() string {
	at := ""
	if e.Addr != "" {
		at = " at " + e.Addr
	}
	switch e.Kind {
	case ErrWrongCluster:
		if e.Remote == "" { // a refusing node does not name its cluster
			return fmt.Sprintf("peer handshake refused: node %d%s is in another cluster than this node's (%q): "+
				"nodes only talk within one cluster; check the peer addresses and the cluster id this node and that one were started with",
				e.Peer, at, e.Local)
		}
		return fmt.Sprintf("peer handshake refused: node %d%s is in cluster %q, this node is in cluster %q: "+
			"nodes only talk within one cluster; check the peer addresses and the cluster id this node and that one were started with",
			e.Peer, at, e.Remote, e.Local)
	case ErrProtocolVersion:
		return fmt.Sprintf("peer handshake refused: node %d%s speaks peer protocol version %s, this node speaks version %s: "+
			"run the same Spool release on every node (upgrade nodes one at a time to a release that speaks both versions)",
			e.Peer, at, e.Remote, e.Local)
	case ErrPeerRefused:
		return fmt.Sprintf("peer handshake refused: node %d%s: %s", e.Peer, at, e.Why)
	case ErrWrongNode:
		return fmt.Sprintf("peer handshake refused: the address of node %s%s reaches node %s: "+
			"the peer address list is stale or wrong; fix it so each node id names the node at that address",
			e.Local, at, e.Remote)
	}
	return fmt.Sprintf("peer handshake refused: %v (this node %q, peer %q)", e.Kind, e.Local, e.Remote)
}

// Reasons in the ErrorInfo detail of a refusal, so that the dialing node
// gets the same typed error as the refusing one.
const (
	errorDomain         = "spool.cluster.v1"
	reasonWrongCluster  = "WRONG_CLUSTER"
	reasonVersion       = "PROTOCOL_VERSION"
	reasonWrongNode     = "WRONG_NODE"
	reasonPeerRefused   = "PEER_REFUSED"
	metadataWhy         = "why"
	metadataLocal       = "refuser_value"
	metadataRemote      = "refused_value"
	metadataRefuserNode = "refuser_node"
	metadataRefusedNode = "refused_node"
)

var reasons = map[error]string{ErrWrongCluster: reasonWrongCluster, ErrProtocolVersion: reasonVersion, ErrWrongNode: reasonWrongNode, ErrPeerRefused: reasonPeerRefused}

// checkHello is what both ends check of the other's Hello: same cluster,
// same protocol version, and (when expectTo) addressed to this node.
// peer is the node id the hello claims (or the one dialed).
func checkHello(clusterID string, version uint32, local uint64, h *clusterv1.Hello, peer uint64, expectTo bool) *HandshakeError {
	switch {
	case h.GetClusterId() != clusterID:
		return &HandshakeError{Kind: ErrWrongCluster, Local: clusterID, Remote: h.GetClusterId(), Peer: peer}
	case h.GetProtocolVersion() != version:
		return &HandshakeError{Kind: ErrProtocolVersion, Local: strconv.FormatUint(uint64(version), 10), Remote: strconv.FormatUint(uint64(h.GetProtocolVersion()), 10), Peer: peer}
	case expectTo && h.GetToNode() != local:
		return &HandshakeError{Kind: ErrWrongNode, Local: strconv.FormatUint(h.GetToNode(), 10), Remote: strconv.FormatUint(local, 10), Peer: peer}
	}
	return nil
}

// accept asks AcceptPeer (if set) whether to take the peer, given what its
// Hello advertised; a refusal names the peer and the reason.
func (t *GRPC) accept(peer uint64, h *clusterv1.Hello) *HandshakeError {
	if t.cfg.AcceptPeer == nil {
		return nil
	}
	if err := t.cfg.AcceptPeer(peer, *advertisedIn(h)); err != nil {
		return &HandshakeError{Kind: ErrPeerRefused, Peer: peer, Why: err.Error()}
	}
	return nil
}

// refusal is the gRPC status a refusing server returns: FAILED_PRECONDITION,
// the message as the refusing node words it (with the values from its side),
// and an ErrorInfo that lets the dialing node rebuild the error from its side.
// A refusal never names this node's cluster id: whoever dialed may be no
// node at all.
func refusal(e *HandshakeError, local uint64) error {
	msg := e.Error()
	if e.Kind == ErrWrongCluster {
		e = &HandshakeError{Kind: ErrWrongCluster, Remote: e.Remote, Peer: e.Peer}
		msg = fmt.Sprintf("peer handshake refused: node %d is not in cluster %q", local, e.Remote)
	}
	st := status.New(codes.FailedPrecondition, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: reasons[e.Kind], Domain: errorDomain,
		Metadata: map[string]string{
			metadataLocal: e.Local, metadataRemote: e.Remote,
			metadataRefuserNode: strconv.FormatUint(local, 10), metadataRefusedNode: strconv.FormatUint(e.Peer, 10),
			metadataWhy: e.Why,
		},
	}); err == nil {
		st = d
	}
	return st.Err()
}

// refusedBy turns a refusal received from the peer into a HandshakeError
// from this node's side (Local and Remote swapped), or returns nil when err
// is no refusal.
func refusedBy(err error, peer uint64, addr string) *HandshakeError {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != errorDomain {
			continue
		}
		md := info.GetMetadata()
		e := &HandshakeError{Local: md[metadataRemote], Remote: md[metadataLocal], Peer: peer, Addr: addr}
		switch info.GetReason() {
		case reasonWrongCluster:
			e.Kind = ErrWrongCluster
		case reasonVersion:
			e.Kind = ErrProtocolVersion
		case reasonWrongNode:
			e.Kind = ErrWrongNode
			e.Local, e.Remote = strconv.FormatUint(peer, 10), md[metadataRefuserNode]
		case reasonPeerRefused:
			e.Kind, e.Why = ErrPeerRefused, "it refuses this node's release: "+md[metadataWhy]
		default:
			continue
		}
		return e
	}
	return nil
}

// isHandshakeRefusal reports whether err is a refused handshake.
func isHandshakeRefusal(err error) bool {
	var h *HandshakeError
	return errors.As(err, &h)
}
