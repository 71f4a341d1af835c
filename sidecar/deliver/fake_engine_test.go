package deliver

import (
	"fmt"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine"
)

// fakeEngine is an in-memory Engine for driver tests. Produce calls done
// synchronously, on the caller's goroutine (as the real engine does for a
// batch over its limit): the nastiest case for a caller that holds state.
type fakeEngine struct {
	mu       sync.Mutex
	parts    map[string][][]engine.Record
	pos      map[string]map[int32]engine.Position // group/topic
	changed  map[string]chan struct{}
	watchers map[string][]chan<- struct{}
	// maxBatchBytes refuses larger appends with engine.ErrBatchTooLarge, as
	// the log does (0: 4 MiB, the log's default).
	maxBatchBytes int
	produceErrs   int // appends refused for their size
	now           func() time.Time
}

func newFakeEngine(topics map[string]int32) *fakeEngine {
	e := &fakeEngine{parts: map[string][][]engine.Record{}, pos: map[string]map[int32]engine.Position{},
		changed: map[string]chan struct{}{}, watchers: map[string][]chan<- struct{}{}, maxBatchBytes: 4 << 20, now: time.Now}
	for t, n := range topics {
		e.parts[t] = make([][]engine.Record, n)
		e.changed[t] = make(chan struct{})
	}
	return e
}

func (e *fakeEngine) Partitions(topic string) (int32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps, ok := e.parts[topic]
	if !ok {
		return 0, fmt.Errorf("unknown topic %q", topic)
	}
	return int32(len(ps)), nil
}

func recSize(r *engine.Record) int {
	n := len(r.ID) + len(r.Key) + len(r.Value) + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
}

func (e *fakeEngine) Produce(topic string, p int32, recs []engine.Record, done func(int64, error)) {
	e.mu.Lock()
	size := 0
	for i := range recs {
		size += recSize(&recs[i])
	}
	if size > e.maxBatchBytes {
		e.produceErrs++
		e.mu.Unlock()
		done(0, fmt.Errorf("%w: %d bytes, limit is %d", engine.ErrBatchTooLarge, size, e.maxBatchBytes))
		return
	}
	ps, ok := e.parts[topic]
	if !ok || p < 0 || int(p) >= len(ps) {
		e.mu.Unlock()
		done(0, fmt.Errorf("unknown partition %s/%d", topic, p))
		return
	}
	base := int64(len(ps[p]))
	for _, r := range recs {
		r.Offset = int64(len(ps[p]))
		r.Timestamp = e.now().UnixMilli()
		ps[p] = append(ps[p], r)
	}
	close(e.changed[topic])
	e.changed[topic] = make(chan struct{})
	for _, w := range e.watchers[topic] {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
	done(base, nil)
}

// publish appends records synchronously (test setup).
func (e *fakeEngine) publish(topic string, p int32, recs ...engine.Record) {
	var err error
	e.Produce(topic, p, recs, func(_ int64, err2 error) { err = err2 })
	if err != nil {
		panic(err)
	}
}

func (e *fakeEngine) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps, ok := e.parts[topic]
	if !ok || p < 0 || int(p) >= len(ps) {
		return dst, fmt.Errorf("unknown partition %s/%d", topic, p)
	}
	n := 0
	for o := offset; o < int64(len(ps[p])); o++ {
		dst = append(dst, ps[p][o])
		n += recSize(&ps[p][o])
		if n >= maxBytes {
			break
		}
	}
	return dst, nil
}

func (e *fakeEngine) Changed(topic string) (<-chan struct{}, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed[topic], nil
}

func (e *fakeEngine) Watch(topics []string, ch chan<- struct{}) (func(), error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range topics {
		e.watchers[t] = append(e.watchers[t], ch)
	}
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, t := range topics {
			ws := e.watchers[t]
			for i, w := range ws {
				if w == ch {
					e.watchers[t] = append(ws[:i:i], ws[i+1:]...)
					break
				}
			}
		}
	}, nil
}

func (e *fakeEngine) RecordTime(topic string, p int32, offset int64) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := e.parts[topic]
	if int(p) >= len(ps) || offset >= int64(len(ps[p])) {
		return 0, fmt.Errorf("no record at %s/%d/%d", topic, p, offset)
	}
	return ps[p][offset].Timestamp, nil
}

func (e *fakeEngine) Offsets(topic string, p int32) (int64, int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := e.parts[topic]
	if int(p) >= len(ps) {
		return 0, 0, fmt.Errorf("unknown partition %s/%d", topic, p)
	}
	return 0, int64(len(ps[p])), nil
}

func (e *fakeEngine) LoadPositions(group, topic string) (map[int32]engine.Position, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[int32]engine.Position{}
	for p, pos := range e.pos[group+"/"+topic] {
		out[p] = pos
	}
	return out, nil
}

func (e *fakeEngine) CommitPositions(group, topic string, pos map[int32]engine.Position) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[int32]engine.Position{}
	for p, x := range pos {
		m[p] = x
	}
	e.pos[group+"/"+topic] = m
	return nil
}

func (e *fakeEngine) committed(group, topic string, p int32) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pos[group+"/"+topic][p].Next
}

func (e *fakeEngine) records(topic string, p int32) []engine.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.Record(nil), e.parts[topic][p]...)
}
