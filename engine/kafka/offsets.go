package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Offsets are the partition's log start offset and high watermark (the
// end a read_uncommitted reader sees, which Fetch reads up to; Spool does
// not write transactions), from a listing of the whole topic that was sent
// after the call began: concurrent calls for partitions of one topic share
// it (offsetsBatch), and no answer is older than its call.
func (b *Backend) Offsets(topic string, p int32) (start, end int64, err error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return 0, 0, err
	}
	l := part.t.offsets.listing(func(l *offsetsListing) { b.listOffsets(part.t, l) })
	return l.of(b, part)
}

// listOffsets fills l with the start and end offsets of every partition
// of t: kadm's ListStartOffsets and ListEndOffsets, sent together, each
// one ListOffsets request per leader broker of the topic's partitions
// (found in the client's cached metadata).
func (b *Backend) listOffsets(t *topic, l *offsetsListing) {
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var startErr error
	wg.Go(func() { l.starts, startErr = b.admin.ListStartOffsets(ctx, t.kname) })
	l.ends, l.err = b.admin.ListEndOffsets(ctx, t.kname)
	wg.Wait()
	if l.err == nil {
		l.err = startErr
	}
}

// offsetsListing is one listing of a topic's start and end offsets. err
// is a failure of the listing (a broker unreachable): partitions it left
// out have no answer.
type offsetsListing struct {
	done         chan struct{} // closed once the listing is filled in
	starts, ends kadm.ListedOffsets
	err          error
}

// of is the partition's start and end in the listing, or why there are
// none; errors name the partition, as every error of the backend does.
func (l *offsetsListing) of(b *Backend, part *partition) (start, end int64, err error) {
	kname := part.t.kname
	for _, lo := range []kadm.ListedOffsets{l.starts, l.ends} {
		if o, ok := lo.Lookup(kname, part.num); ok && o.Err != nil {
			return 0, 0, fmt.Errorf("kafka: list offsets of %s/%d: %w", part.t.spec.Name, part.num, o.Err)
		}
		if o, ok := lo.Lookup(kname, -1); ok && o.Err != nil { // kadm's entry for a topic that does not exist
			return 0, 0, fmt.Errorf("kafka: list offsets of %s/%d (Kafka topic %s): %w", part.t.spec.Name, part.num, kname, o.Err)
		}
	}
	s, okStart := l.starts.Lookup(kname, part.num)
	e, okEnd := l.ends.Lookup(kname, part.num)
	switch {
	case okStart && okEnd:
		return s.Offset, e.Offset, nil
	case l.err != nil:
		return 0, 0, b.connErr(part, l.err)
	}
	return 0, 0, fmt.Errorf("kafka: list offsets of %s/%d: Kafka topic %s has no partition %d (was it deleted or recreated with fewer partitions?)", part.t.spec.Name, part.num, kname, part.num)
}

// offsetsBatch lets concurrent Offsets calls for partitions of one topic
// share a listing without answering any call from a listing sent before
// it began (a produce acked before the call, or records deleted before
// it, are seen). A call joins the topic's open listing, the one not yet
// sent, or opens one; one listing per topic is in flight at a time, and
// the next opens while it is, collecting the calls that arrive meanwhile
// (group commit, as engine/log's append rounds). A call alone waits for
// nothing but its own listing.
//
// Not a cache with an age: a listing some milliseconds old would let a
// reset to the end miss a message another sidecar's publish had just
// acked, and keep answering a start that retention or DeleteRecords had
// moved.
type offsetsBatch struct {
	mu     sync.Mutex      // guards open and flight; a leaf
	open   *offsetsListing // calls join it until it is sent; nil when none
	flight chan struct{}   // done of the last listing sent (closed once answered)
}

// listing is a listing sent after the call began: the open one, or a new
// one that fill fills in, sent once the one in flight has been answered.
func (ob *offsetsBatch) listing(fill func(*offsetsListing)) *offsetsListing {
	ob.mu.Lock()
	if l := ob.open; l != nil {
		ob.mu.Unlock()
		<-l.done // fill returns within requestTimeout
		return l
	}
	l := &offsetsListing{done: make(chan struct{})}
	ob.open = l
	prev := ob.flight
	ob.mu.Unlock()
	if prev != nil {
		<-prev // calls arriving now join l
	}
	ob.mu.Lock()
	ob.open, ob.flight = nil, l.done
	ob.mu.Unlock()
	fill(l)
	close(l.done)
	return l
}

// OffsetForTime is the first offset whose timestamp is at or after ts;
// the end when none is (kadm's ListOffsetsAfterMilli asks for the end
// offsets of the partitions that have none).
func (b *Backend) OffsetForTime(topic string, p int32, ts time.Time) (int64, error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	listed, err := b.admin.ListOffsetsAfterMilli(ctx, max(ts.UnixMilli(), 0), part.t.kname)
	l := &offsetsListing{starts: listed, ends: listed, err: err}
	off, _, err := l.of(b, part)
	return off, err
}
