package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups"
)

// positionsKey is a group's key in the positions bucket.
func positionsKey(group, topic string) string { return group + "/" + topic }

// LoadPositions reads a group's committed positions on a topic (none when
// it has committed nothing).
func (b *Backend) LoadPositions(group, topic string) (map[int32]engine.Position, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	e, err := b.positions.Get(ctx, positionsKey(group, topic))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return map[int32]engine.Position{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: positions of group %q on %q: %w", group, topic, err)
	}
	out, err := groups.Decode(e.Value())
	if err != nil {
		return nil, fmt.Errorf("jetstream: positions of group %q on %q in bucket %s are damaged (%v): reset the group's offsets", group, topic, b.positions.Bucket(), err)
	}
	return out, nil
}

// CommitPositions writes a group's positions on a topic (all of them, as
// the embedded log's offsets files do, in their encoding). Without a
// coordinator one sidecar commits a group's positions; with one (several
// sidecars of the group), commits go through Coordinate instead.
func (b *Backend) CommitPositions(group, topic string, pos map[int32]engine.Position) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := b.positions.Put(ctx, positionsKey(group, topic), groups.Encode(nil, pos)); err != nil {
		return fmt.Errorf("jetstream: commit positions of group %q on %q: %w", group, topic, err)
	}
	return nil
}
