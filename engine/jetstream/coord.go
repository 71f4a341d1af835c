package jetstream

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
)

// Consumer groups across sidecars.
//
// The coordinator is engine/groups/coord's state machine, the one the
// embedded cluster replicates with raft, kept here as one value per group
// in the bucket <prefix>_groups: the group's State (coord.EncodeState)
// after 8 bytes holding the clock of the last command applied. A command
// is applied by whichever sidecar sends it: read the value, apply the
// commands Next says are due (expired members), then the command, and
// write the value back only if its revision is still the one read
// (compare-and-set); on a conflict, read again and retry. Every change is
// therefore applied to the latest state exactly once, in one order, as on
// the raft log. There is no leader to stamp commands: each is stamped with
// max(the sidecar's clock, the last stamp), so the group's time never goes
// back; sidecars' clocks must agree to well within the session timeout
// (NTP does). Expiries are applied by the next command of any member
// (every member heartbeats every third of its session timeout).

// coordRetries bounds the compare-and-set attempts of one command (each
// conflict is another sidecar's command applied meanwhile).
const coordRetries = 50

// Coordinate applies one coordinator command to its group's state (see
// above). A refusal is returned both as Result.Err and as the error, as
// the embedded coordinator does.
func (b *Backend) Coordinate(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error) {
	if err := cmd.Validate(); err != nil {
		return coord.Result{Err: err}, err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	for range coordRetries {
		st, at, rev, raw, err := b.readGroup(ctx, cmd.Group)
		if err != nil {
			return coord.Result{}, err
		}
		now := max(time.Now().UnixMilli(), at)
		due, _ := coord.Next(st, now)
		for _, d := range due {
			st.Apply(d) // a refusal changes nothing
		}
		cmd.AtMs = now
		res := st.Apply(cmd)
		enc, err := encodeGroup(st, now)
		if err != nil {
			return coord.Result{}, err
		}
		if !bytes.Equal(enc[8:], raw) {
			if rev == 0 {
				_, err = b.groups.Create(ctx, keyPart(cmd.Group), enc)
			} else {
				_, err = b.groups.Update(ctx, keyPart(cmd.Group), enc, rev)
			}
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue // another sidecar's command went first: apply to its result
			}
			if err != nil {
				return coord.Result{}, fmt.Errorf("%w: group %q: writing its state to bucket %s: %w", engine.ErrOutcomeUnknown, cmd.Group, b.groups.Bucket(), err)
			}
		}
		return res, res.Err
	}
	return coord.Result{}, fmt.Errorf("jetstream: group %q: %d conflicting commands in a row (too many sidecars changing the group at once?): retry", cmd.Group, coordRetries)
}

// DescribeGroup is the group's state as of now: the stored one with the
// expiries due applied (in memory; the next command stores them).
func (b *Backend) DescribeGroup(ctx context.Context, group string) (*engine.GroupState, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	st, at, _, _, err := b.readGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	due, _ := coord.Next(st, max(time.Now().UnixMilli(), at))
	for _, d := range due {
		st.Apply(d)
	}
	return st, nil
}

// readGroup reads a group's state, its last stamp and revision (0 when
// the group has none yet) and the state's encoding as stored.
func (b *Backend) readGroup(ctx context.Context, group string) (st *coord.State, at int64, rev uint64, raw []byte, err error) {
	e, err := b.groups.Get(ctx, keyPart(group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		st = coord.NewState()
		raw, err = coord.EncodeState(st)
		return st, 0, 0, raw, err
	}
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("jetstream: group %q: reading bucket %s: %w", group, b.groups.Bucket(), err)
	}
	v := e.Value()
	if len(v) < 8 {
		return nil, 0, 0, nil, fmt.Errorf("jetstream: group %q: value in bucket %s is %d bytes, not a group state: delete the key to start the group over", group, b.groups.Bucket(), len(v))
	}
	st, err = coord.DecodeState(v[8:])
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("jetstream: group %q: state in bucket %s: %w (delete the key to start the group over)", group, b.groups.Bucket(), err)
	}
	return st, int64(binary.BigEndian.Uint64(v)), e.Revision(), v[8:], nil
}

func encodeGroup(st *coord.State, at int64) ([]byte, error) {
	enc, err := coord.EncodeState(st)
	if err != nil {
		return nil, err
	}
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(enc)), uint64(at)), enc...), nil
}
