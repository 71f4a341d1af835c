package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups"
)

// positionsKey is a group's key in the positions bucket: group/topic,
// each with every byte other than - _ a-z A-Z 0-9 as =XX (hex), since
// keys allow few characters (not the ~ of a dead-letter topic's purge
// mark) and may not start or end with a dot.
func positionsKey(group, topic string) string { return keyPart(group) + "/" + keyPart(topic) }

func keyPart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

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
