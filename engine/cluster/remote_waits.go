package cluster

import (
	"context"
	"sync"
	"time"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// remoteWaits keeps one waiter per partition this node reads remotely
// (remoteParts): each asks a replica for the partition's committed end,
// to be answered once it passes the end this node knows
// (FetchRequest.wait_past) or after remoteWaitMax, and signals the
// partition's watchers when it moved (noteRemoteEnd). At idle a waiter
// costs its replica one call per remoteWaitMax; a commit reaches this
// node's watchers as the replica applies it. Owned by the goroutine that
// calls sync and stop (the node's remote-read loop).
type remoteWaits struct {
	c       *cluster
	waiters map[*partition]context.CancelFunc
	wg      sync.WaitGroup
}

func newRemoteWaits(c *cluster) *remoteWaits {
	return &remoteWaits{c: c, waiters: map[*partition]context.CancelFunc{}}
}

// sync starts a waiter for each partition read remotely now and stops
// those of the partitions no longer read so.
func (w *remoteWaits) sync(ctx context.Context) {
	want := w.c.remoteParts()
	for p, cancel := range w.waiters {
		if !want[p] {
			cancel()
			delete(w.waiters, p)
		}
	}
	for p := range want {
		if _, ok := w.waiters[p]; ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w.waiters[p] = cancel
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.c.waitRemote(wctx, p)
		}()
	}
}

// stop ends every waiter and waits for them.
func (w *remoteWaits) stop() {
	for p, cancel := range w.waiters {
		cancel()
		delete(w.waiters, p)
	}
	w.wg.Wait()
}

// waitRemote asks a replica of part, again and again until ctx ends, for
// its committed end once it passes the one this node knows. A replica
// that answers at once without news — a release that does not wait, a
// failure, a partition not placed yet — is asked again after
// remotePollInterval, as every call was before replicas waited.
func (c *cluster) waitRemote(ctx context.Context, part *partition) {
	for ctx.Err() == nil {
		past := max(part.Committed.Load(), part.X.remoteEnd.Load())
		began := time.Now()
		resp, err := c.askReplicaWithin(ctx, part, remoteWaitMax+c.cfg.ProduceTimeout, func(cctx context.Context, cl clusterv1.NodeServiceClient) (*clusterv1.FetchResponse, error) {
			return cl.Fetch(cctx, &clusterv1.FetchRequest{ClusterId: c.id.ClusterID, Topic: part.Topic.Name, Partition: part.Num, Offset: -1,
				WaitPast: past, MaxWaitMs: int32(remoteWaitMax / time.Millisecond)})
		})
		if err == nil {
			noteRemoteEnd(part, resp.GetEnd())
			if resp.GetEnd() > past || time.Since(began) >= remotePollInterval {
				continue
			}
		}
		t := time.NewTimer(remotePollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
