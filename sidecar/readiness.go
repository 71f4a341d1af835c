package sidecar

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/deliver"
)

// readiness decides the admin port's probes (docs/operations.md, "Probes").
//
//   - /startupz: the node has joined its cluster (or runs alone) and every
//     partition replica it holds knows its group's leader, so its copies
//     are being kept up to date: the app may start.
//   - /readyz: the same and, with node.ready_requires_app, an app stream
//     open on every subscription the app consumes over a stream. Once it
//     has held, /readyz stays ready until shutdown: a sidecar that turned
//     unready whenever a partition lost its leader would take every pod of
//     the app out of its Service during a cluster's trouble, which helps
//     nobody (publishes fail with NO_LEADER and say so).
//
// Liveness (/healthz) never depends on any of it: a slow disk or a busy
// peer must not get the sidecar restarted.
type readiness struct {
	eng        engine.Backend
	groups     []*deliver.Group
	requireApp bool
	ready      atomic.Bool // every condition has held once
}

// startup lists why the node is not started yet (empty: it is).
func (r *readiness) startup() []string {
	st, clustered := clusterStatus(r.eng)
	if !clustered {
		return nil
	}
	if !st.Ready {
		return []string{"not a member of the cluster yet (joining, or waiting for the controller)"}
	}
	var out []string
	for _, rep := range st.Replicas {
		if rep.Leader == 0 {
			out = append(out, fmt.Sprintf("partition %s/%d: its replicas have no leader yet", rep.Topic, rep.Partition))
		}
	}
	return out
}

// notReady lists why the node is not ready (empty: it is).
func (r *readiness) notReady(ctx context.Context) []string {
	if r.ready.Load() {
		return nil
	}
	out := r.startup()
	if r.requireApp {
		for _, g := range r.groups {
			if len(g.Topics(deliver.ModeStream)) == 0 {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			snap, err := g.Snapshot(sctx)
			cancel()
			if err != nil || snap.Consumers == 0 {
				out = append(out, fmt.Sprintf("group %s: no app stream connected (node.ready_requires_app)", g.Name()))
			}
		}
	}
	if len(out) == 0 {
		r.ready.Store(true)
	}
	return out
}
