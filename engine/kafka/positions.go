package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups"
)

// DefaultMetadataMaxBytes bounds a commit's metadata: the broker's
// offset.metadata.max.bytes default (a commit with more is refused).
const DefaultMetadataMaxBytes = 4096

// metadataPrefix starts the metadata of every commit Spool makes; other
// metadata (a Kafka consumer's commit) is read as "no finished offsets".
const metadataPrefix = "spool1:"

// encodeDone is the commit metadata for the finished offsets above next:
// metadataPrefix, then runs of consecutive offsets as gap.length in base
// 36, comma-separated, where gap is the run's start minus the end of the
// run before (next for the first). Text, since Kafka keeps metadata as a
// UTF-8 string. Runs that would make it longer than maxBytes are left out
// (the lowest runs are kept); dropped counts their offsets.
func encodeDone(next int64, done []int64, maxBytes int) (meta string, dropped int) {
	if len(done) == 0 {
		return "", 0
	}
	var b strings.Builder
	b.WriteString(metadataPrefix)
	end := next // the first offset not covered by the runs so far
	for i := 0; i < len(done); {
		j := i + 1
		for j < len(done) && done[j] == done[j-1]+1 {
			j++
		}
		run := strconv.FormatInt(done[i]-end, 36) + "." + strconv.FormatInt(int64(j-i), 36)
		if i > 0 {
			run = "," + run
		}
		if b.Len()+len(run) > maxBytes {
			if i == 0 {
				return "", len(done)
			}
			return b.String(), len(done) - i
		}
		b.WriteString(run)
		end = done[j-1] + 1
		i = j
	}
	return b.String(), 0
}

// decodeDone parses encodeDone's metadata. Metadata that Spool did not
// write, or that is damaged, gives no finished offsets and an error: the
// position is still the committed offset, and the finished offsets above
// it are delivered again.
func decodeDone(next int64, meta string) ([]int64, error) {
	rest, ok := strings.CutPrefix(meta, metadataPrefix)
	if !ok {
		return nil, nil // no finished offsets, or another consumer's metadata
	}
	var done []int64
	end := next
	for run := range strings.SplitSeq(rest, ",") {
		g, l, ok := strings.Cut(run, ".")
		gap, err1 := strconv.ParseInt(g, 36, 64)
		n, err2 := strconv.ParseInt(l, 36, 64)
		if !ok || err1 != nil || err2 != nil || gap < 1 || n < 1 || n > groups.MaxDecodedDone-int64(len(done)) || end > (1<<62)-gap-n {
			return nil, fmt.Errorf("bad run %q in the commit metadata", run)
		}
		start := end + gap
		for o := start; o < start+n; o++ {
			done = append(done, o)
		}
		end = start + n
	}
	return done, nil
}

// kafkaGroup is the Kafka consumer group and topic that keep a Spool
// group's positions on a topic: <prefix><group> on <prefix><topic>. The
// sidecar also keeps marks under names no topic has, <topic>~<mark> (a
// dead-letter topic's purge mark): those are positions of the group
// <prefix><group>~<mark> on the topic.
func (b *Backend) kafkaGroup(group, topic string) (kgroup, ktopic string) {
	kgroup = b.cfg.Prefix + group
	if t, mark, ok := strings.Cut(topic, "~"); ok {
		topic, kgroup = t, kgroup+"~"+mark
	}
	return kgroup, b.cfg.Prefix + topic
}

// LoadPositions reads a group's committed positions on a topic (none when
// it has committed nothing): the Kafka group's committed offsets, and the
// finished offsets above each in its metadata.
func (b *Backend) LoadPositions(group, topic string) (map[int32]engine.Position, error) {
	kgroup, ktopic := b.kafkaGroup(group, topic)
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	var resp kadm.OffsetResponses
	err := retryCoordinator(ctx, func() (err error) {
		resp, err = b.admin.FetchOffsets(ctx, kgroup)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]engine.Position{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: positions of group %q on %q (Kafka group %q): %w", group, topic, kgroup, err)
	}
	out := map[int32]engine.Position{}
	for p, o := range resp[ktopic] {
		if o.At < 0 {
			continue
		}
		done, err := decodeDone(o.At, o.Metadata)
		if err != nil {
			b.cfg.Logger.Warn("kafka: the finished offsets of a commit are unreadable; delivering them again", "group", kgroup, "topic", ktopic, "partition", p, "err", err)
		}
		out[p] = engine.Position{Next: o.At, Done: done}
	}
	return out, nil
}

// CommitPositions commits a group's positions on a topic as the Kafka
// group's offsets: Next as the committed offset (what Kafka's tools show
// lag from), the finished offsets above it in the metadata, as many as
// Config.MetadataMaxBytes holds (Hooks.PositionsTruncated counts the
// rest, which are delivered again after a restart). One sidecar commits a
// group's positions: the commits carry no generation, which Kafka allows
// for a group without members.
func (b *Backend) CommitPositions(group, topic string, pos map[int32]engine.Position) error {
	kgroup, ktopic := b.kafkaGroup(group, topic)
	offs := kadm.Offsets{}
	for p, ps := range pos {
		meta, dropped := encodeDone(ps.Next, ps.Done, b.cfg.MetadataMaxBytes)
		if dropped > 0 && b.cfg.Hooks.PositionsTruncated != nil {
			b.cfg.Hooks.PositionsTruncated(group, topic, p, dropped)
		}
		offs.Add(kadm.Offset{Topic: ktopic, Partition: p, At: ps.Next, LeaderEpoch: -1, Metadata: meta})
	}
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	err := retryCoordinator(ctx, func() error {
		resp, err := b.admin.CommitOffsets(ctx, kgroup, offs)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kafka: commit positions of group %q on %q (Kafka group %q): %w", group, topic, kgroup, err)
	}
	return nil
}

// retryCoordinator runs fn again while it fails because the group's
// coordinator is not ready (Kafka creates __consumer_offsets on a group's
// first use, and moves coordinators with its leaders), until ctx ends.
// Other errors, retriable or not, are the caller's.
func retryCoordinator(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, kerr.CoordinatorNotAvailable) && !errors.Is(err, kerr.CoordinatorLoadInProgress) && !errors.Is(err, kerr.NotCoordinator) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond): // the coordinator's start takes this order of time
		}
	}
}
