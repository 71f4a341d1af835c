package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
	"github.com/spoolmq/spool/internal/buildinfo"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Cluster versions (engine/meta, docs/upgrading.md): this node advertises
// the range its release speaks in every Hello; the controller's leader
// raises the cluster version once every member has advertised a higher one
// for ClusterConfig.AutoFinalizeAfter (or an operator asks,
// FinalizeClusterVersion); a node whose release does not speak the
// cluster's version refuses to join or start.

// advertised is what this node says of itself in its Hellos.
func (c *member) advertised() transport.Advertised {
	r := c.cfg.ClusterVersions
	return transport.Advertised{ClusterVersionMin: r.Min, ClusterVersionMax: r.Max, Release: buildinfo.Version}
}

// heardRange is the range a peer advertised (a 0.1.0 node advertises
// none: version 1 only).
func heardRange(a *transport.Advertised) meta.VersionRange {
	if a.ClusterVersionMin == 0 && a.ClusterVersionMax == 0 {
		return meta.Unadvertised
	}
	return meta.VersionRange{Min: a.ClusterVersionMin, Max: a.ClusterVersionMax}
}

// acceptPeer refuses the raft streams of a peer whose release does not
// speak the cluster's version (transport.GRPCConfig.AcceptPeer): a node
// rolled back to a release too old after the cluster was finalized — a
// 0.1.0 node cannot tell by itself — takes no part until it is upgraded.
func (c *member) acceptPeer(_ uint64, a transport.Advertised) error {
	if err := meta.CheckSpeaks(max(c.clusterVersion.Load(), 1), heardRange(&a)); err != nil {
		return errors.New(versionText(err)) // the transport logs the refusal

	}
	return nil
}

// speakNow is the range each node of nodes speaks as this node knows it
// now: its own, and that of each peer whose streams are up (a peer not
// connected may have been restarted with another release since it said).
func (c *member) speakNow(nodes []meta.Node) map[meta.NodeID]meta.VersionRange {
	out := make(map[meta.NodeID]meta.VersionRange, len(nodes))
	for _, nd := range nodes {
		if nd.ID == c.id.NodeID {
			out[nd.ID] = c.cfg.ClusterVersions
			continue
		}
		if ps, ok := c.tr.Peer(nd.ID); ok && ps.Connected && ps.Heard != nil {
			out[nd.ID] = heardRange(ps.Heard)
		}
	}
	return out
}

// planFinalize is the FinalizeVersion this node would propose now.
func (c *member) planFinalize() (meta.FinalizeVersion, uint32, error) {
	c.mu.Lock()
	st := c.state.Clone()
	c.mu.Unlock()
	f, err := meta.PlanFinalize(st, c.speakNow(st.Nodes()))
	return f, st.ClusterVersion(), err
}

// FinalizeClusterVersion raises the cluster version to the highest every
// node speaks (spool cluster finalize). Refused with engine.ErrClusterVersion
// naming the node that holds it back (an older release, or not reachable
// from this node), or saying there is nothing to finalize.
func (n *Node) FinalizeClusterVersion(ctx context.Context) (engine.ClusterVersionChange, error) {
	return n.role.finalize(ctx)
}

func (c *member) finalize(ctx context.Context) (engine.ClusterVersionChange, error) {
	if err := c.awaitReady(c.cfg.JoinTimeout); err != nil {
		return engine.ClusterVersionChange{}, err
	}
	f, prev, err := c.planFinalize()
	if err == nil {
		_, err = c.proposeMeta(ctx, meta.Command{FinalizeVersion: &f})
	}
	if errors.Is(err, meta.ErrVersion) {
		return engine.ClusterVersionChange{}, fmt.Errorf("%w: %s", engine.ErrClusterVersion, versionText(err))
	}
	if err != nil {
		return engine.ClusterVersionChange{}, err
	}
	c.logger.Warn("spool cluster: the cluster version is finalized: nodes of releases that do not speak it can no longer join (docs/upgrading.md)", "from", prev, "to", f.Version)
	return engine.ClusterVersionChange{Previous: prev, Version: f.Version}, nil
}

// autoFinalize, on the controller's leader, finalizes the cluster version
// once the same higher version has been spoken by every node for
// AutoFinalizeAfter (< 0: never by itself).
func (c *member) autoFinalize(ctx context.Context, now time.Time) {
	if st, ok := c.host.Status(controllerGroup); c.cfg.AutoFinalizeAfter < 0 || !ok || !st.IsLeader {
		c.finalizeSince, c.finalizeWant = time.Time{}, 0 // a new leader starts its own clock
		return
	}
	f, _, err := c.planFinalize()
	if err != nil {
		c.finalizeSince, c.finalizeWant = time.Time{}, 0
		return
	}
	if c.finalizeWant != f.Version {
		c.finalizeSince, c.finalizeWant = now, f.Version
		c.logger.Info("spool cluster: every node speaks a higher cluster version; finalizing after cluster.auto_finalize_after unless one rolls back",
			"version", f.Version, "after", c.cfg.AutoFinalizeAfter)
	}
	if now.Sub(c.finalizeSince) < c.cfg.AutoFinalizeAfter {
		return
	}
	if _, err := c.finalize(ctx); err != nil {
		c.logger.Warn("spool cluster: finalizing the cluster version failed; retrying", "version", f.Version, "err", err)
		return
	}
	c.finalizeSince, c.finalizeWant = time.Time{}, 0
}

// finalizeAtBirth raises a new cluster, whose only node is this one, to
// the highest cluster version this release speaks, as CockroachDB's new
// clusters start at their binary's version: there is no older node to wait
// for, and the release's gated behaviour (quiescence) is on from the start.
// Not with finalization by hand (AutoFinalizeAfter < 0): the operator
// decides. A failure is logged; autoFinalize tries again later.
func (c *member) finalizeAtBirth(ctx context.Context) {
	if c.cfg.AutoFinalizeAfter < 0 {
		return
	}
	f, prev, err := c.planFinalize()
	if err == nil {
		_, err = c.proposeMeta(ctx, meta.Command{FinalizeVersion: &f})
	}
	if err != nil {
		if !errors.Is(err, meta.ErrVersion) { // ErrVersion: nothing above the cluster's version
			c.logger.Warn("spool cluster: raising the new cluster to this release's cluster version failed; the controller retries after cluster.auto_finalize_after", "err", err)
		}
		return
	}
	c.logger.Info("spool cluster: a new cluster starts at this release's cluster version", "from", prev, "to", f.Version)
}

// admitsVersions checks, at the node that admits a joining one, that the
// joining node's release speaks the cluster's version (a 0.1.0 node says
// nothing: version 1 only).
func (c *member) admitsVersions(req *clusterv1.JoinRequest) error {
	r := meta.VersionRange{Min: req.GetClusterVersionMin(), Max: req.GetClusterVersionMax()}
	if r == (meta.VersionRange{}) {
		r = meta.Unadvertised
	}
	c.mu.Lock()
	v := c.state.ClusterVersion()
	c.mu.Unlock()
	if err := meta.CheckSpeaks(v, r); err != nil {
		return fmt.Errorf("the joining node cannot be admitted: %s", versionText(err))
	}
	return nil
}

// checkSpeaks refuses to go on with a controller state whose cluster
// version this node's release does not speak: a node rolled back to an
// older release after the cluster was finalized stops (and is told why)
// as it replays the controller's log.
func (c *member) checkSpeaks(st *meta.State) error {
	if err := meta.CheckSpeaks(st.ClusterVersion(), c.cfg.ClusterVersions); err != nil {
		err = fmt.Errorf("engine: node %d stops (%w): %s", c.id.NodeID, engine.ErrClusterVersion, versionText(err))
		c.logger.Error("spool cluster: " + err.Error())
		return err
	}
	return nil
}

// versionStatus fills in the cluster version, what finalizing would give
// (the version itself when nothing is pending), and what each member
// advertised.
func (c *member) versionStatus(out *engine.ClusterStatus, st *meta.State) {
	out.ClusterVersion, out.ClusterVersionAvailable = st.ClusterVersion(), st.ClusterVersion()
	speaks := c.speakNow(st.Nodes())
	if f, err := meta.PlanFinalize(st, speaks); err == nil {
		out.ClusterVersionAvailable = f.Version
	}
	for i := range out.Members {
		m := &out.Members[i]
		if m.ID == c.id.NodeID {
			m.Release, m.ClusterVersionMin, m.ClusterVersionMax = buildinfo.Version, c.cfg.ClusterVersions.Min, c.cfg.ClusterVersions.Max
			continue
		}
		if ps, ok := c.tr.Peer(m.ID); ok && ps.Heard != nil {
			r := heardRange(ps.Heard)
			m.Release, m.ClusterVersionMin, m.ClusterVersionMax = ps.Heard.Release, r.Min, r.Max
		}
	}
}

// versionText is a meta.ErrVersion refusal's text without the sentinel's,
// for errors that carry engine.ErrClusterVersion instead.
func versionText(err error) string {
	return strings.TrimPrefix(strings.TrimPrefix(err.Error(), meta.ErrVersion.Error()+": "), "meta: ")
}

// RequireFeature (engine.FeatureGate) returns nil when the cluster's
// version turns the feature called name on, else why not and what to do.
func (n *Node) RequireFeature(name string) error {
	f, ok := meta.FeatureNamed(name)
	if !ok {
		return fmt.Errorf("engine: no feature is called %q", name)
	}
	n.mu.Lock()
	v := n.state.ClusterVersion()
	n.mu.Unlock()
	if f.At(v) {
		return nil
	}
	return fmt.Errorf("%w: %s needs cluster version %d and the cluster is at %d: once every node runs a release that speaks %d, finalize (spool cluster finalize; docs/upgrading.md)",
		engine.ErrClusterVersion, f.Name, f.Since, v, f.Since)
}
