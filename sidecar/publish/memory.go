package publish

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// DefaultMemoryBytes is publish.memory_bytes: what publishes in flight may
// hold, for the whole sidecar.
const DefaultMemoryBytes = 16 << 20

// memory bounds the bytes of publish requests in flight (received, not yet
// answered), whatever the number of streams and their pipelines: a request
// that does not fit waits, in arrival order, and its stream reads nothing
// more meanwhile, which pushes back on the producer through gRPC's flow
// control. A request larger than the whole budget takes all of it, alone.
type memory struct {
	limit   int64
	sem     *semaphore.Weighted
	held    prometheus.Gauge
	waits   prometheus.Counter
	refused prometheus.Counter
}

func newMemory(limit int64, m *metrics.Metrics) *memory {
	if limit <= 0 {
		limit = DefaultMemoryBytes
	}
	m.PublishMemoryLimit.Set(float64(limit))
	return &memory{limit: limit, sem: semaphore.NewWeighted(limit), held: m.PublishMemory, waits: m.PublishMemoryWaits, refused: m.PublishMemoryRefused}
}

// requestBytes is what a request holds while in flight: its messages'
// bytes (the rest of the request is small and fixed).
func requestBytes(msgs []*spoolv1.PublishMessage) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.GetId()) + len(m.GetKey()) + len(m.GetPayload()))
		for k, v := range m.GetHeaders() {
			n += int64(len(k) + len(v))
		}
	}
	return n
}

// acquire waits until n bytes (at most the whole budget) are free, or ctx
// ends; it returns the bytes to give back with release. A request whose
// ctx has ended gets none, even when there is room (the semaphore may
// grant it): its caller was told it failed, so it must not be stored.
func (m *memory) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 1), m.limit)
	if !m.sem.TryAcquire(n) {
		m.waits.Inc()
		if err := m.sem.Acquire(ctx, n); err != nil {
			m.refused.Inc()
			return 0, status.Errorf(status.Code(status.FromContextError(err).Err()),
				"publish.memory_bytes (%d) was full of publishes in flight until the request ended: nothing was stored; send it again", m.limit)
		}
	}
	if err := ctx.Err(); err != nil {
		m.sem.Release(n)
		m.refused.Inc()
		return 0, status.FromContextError(err).Err()
	}
	m.held.Add(float64(n))
	return n, nil
}

func (m *memory) release(n int64) {
	m.held.Sub(float64(n))
	m.sem.Release(n)
}
