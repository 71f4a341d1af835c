package deliver

import "time"

// memBudget decides how many bytes each partition of a group may read, so
// that what the group holds — fetched-but-unfinished records in the
// partitions' windows (those at the app and in its frames included: a
// frame's deliveries alias them), the windows' rings, and dead letters being
// published — stays within the group's share of the sidecar's delivery
// memory (delivery.memory_bytes, docs/configuration.md). Pure: no clock (the
// time comes with each call), no I/O; the machine feeds it and obeys it.
//
// The rules (checked by budget_test.go):
//
//   - Never grown: a grant is at most what is free (limit − held). A read
//     returns whole log batches (the first one even when it is larger than
//     the read asked for) and the machine keeps every record it returns,
//     so that no record is read twice: a read may outgrow its grant by its
//     first batch. The machine asks room for a partition's reads as large
//     as the last batch that outgrew a grant, within the fair share
//     (machine.fetchPart), so only a partition's first batch, a batch
//     larger than the fair share, or the progress rule below take the
//     group past its limit: then by at most one batch per read.
//   - Progress: while the group holds no record (empty), every read asked
//     for is made whatever the room (grant.progress) and keeps what it
//     returns, so a budget smaller than one message still delivers, a log
//     batch per partition at a time. The overshoot is then those batches.
//   - Fairness: the fair share of a partition is limit / active partitions.
//     A partition refused for lack of room while under its share waits, in
//     order of arrival; while any partition waits, a partition at or above
//     its share is granted nothing, and the others at most up to their
//     share. Waiting partitions are offered room first each round
//     (waiters), so one busy partition cannot starve the others: the room
//     it gives back goes to those waiting.
//   - Paused time: the time during which some partition waited is counted
//     (spool_delivery_memory_paused_seconds_total).
type memBudget struct {
	limit int64
	held  int64 // bytes the group holds, as of the round's start plus reads since
	// empty: the group holds no record (its windows' rings may still hold
	// bytes): the progress rule applies.
	empty bool
	// waiting holds partitions refused while under their share, oldest first.
	waiting     []*part
	waitSince   time.Time // when waiting became non-empty (zero: empty)
	pausedTotal time.Duration
}

// grant is the room given to one read: the bytes its records may hold.
// While the group holds no record (empty), a read is made even without
// room (the progress rule).
type grant struct {
	bytes int64
	// progress: made while the group is empty, whatever the room (the
	// progress rule).
	progress bool
}

// ok reports whether the read is to be made.
func (g grant) ok() bool { return g.bytes > 0 || g.progress }

// begin starts a round: held is what the group holds now (the trackers'
// HeldBytes and the dead letters being published), records how many
// records that is.
func (b *memBudget) begin(now time.Time, held int64, records int) {
	b.held = held
	b.empty = records == 0
	b.observe(now)
}

// observe adds the time some partition waited up to now to the paused total.
func (b *memBudget) observe(now time.Time) {
	if len(b.waiting) == 0 {
		b.waitSince = time.Time{}
		return
	}
	if b.waitSince.IsZero() {
		b.waitSince = now
		return
	}
	if d := now.Sub(b.waitSince); d > 0 {
		b.pausedTotal += d
		b.waitSince = now
	}
}

// fairShare is the bytes each of active partitions may hold while others wait.
func (b *memBudget) fairShare(active int) int64 { return b.limit / int64(max(active, 1)) }

// ask decides a read of partition p, which holds partHeld bytes, among
// active partitions; the read could use up to wantBytes, and a read smaller
// than minUseful is not worth making (the partition still has records to
// deliver). A grant that is not ok means: do not read now.
func (b *memBudget) ask(now time.Time, p *part, partHeld int64, active int, minUseful, wantBytes int64) grant {
	free := b.limit - b.held
	if b.empty {
		// The progress rule: while the group holds no record, every read
		// is made, however small its room, and keeps what it returns (at
		// least one log batch), so the group goes over by one batch per
		// partition at most. Not only the round's first read: it may be a
		// partition with nothing to read, whose reservation would leave
		// the others too little room for their first record, round after
		// round (TestMachineModel's replay file of 2026-12-01 18:10).
		b.dequeue(now, p)
		g := max(min(free, wantBytes), 0)
		b.held += g
		return grant{bytes: g, progress: true}
	}
	fair := b.fairShare(active)
	others := len(b.waiting)
	if b.isWaiting(p) {
		others--
	}
	// A partition holding nothing is never over its share (the share may
	// round down to 0 bytes with a tiny budget).
	over := partHeld > 0 && partHeld >= fair
	g := min(free, wantBytes)
	if others > 0 {
		if over {
			return grant{}
		}
		g = min(g, max(fair-partHeld, 1))
	}
	if g < max(minUseful, 1) {
		if !over || b.empty {
			b.enqueue(now, p)
		}
		return grant{}
	}
	b.dequeue(now, p)
	b.held += g // reserved until the read is answered (settle)
	return grant{bytes: g}
}

// settle gives back a read's reservation once it is answered.
func (b *memBudget) settle(g grant) { b.held -= g.bytes }

// use records bytes taken (or given back, negative): a read's reservation
// is given back when it is answered and what its records hold is taken.
func (b *memBudget) use(n int64) {
	b.held += n
	if n > 0 {
		b.empty = false
	}
}

// full reports whether a read would be refused to everyone: the driver
// does not wait for new records then.
func (b *memBudget) full() bool { return b.held > 0 && b.held >= b.limit }

// forget removes p from the waiting partitions (it stopped wanting records:
// revoked, paused by a breaker, its window full).
func (b *memBudget) forget(now time.Time, p *part) { b.dequeue(now, p) }

// waiters returns the partitions waiting for room, oldest first, in dst.
func (b *memBudget) waiters(dst []*part) []*part { return append(dst[:0], b.waiting...) }

func (b *memBudget) isWaiting(p *part) bool { return p.budgetWait }

func (b *memBudget) enqueue(now time.Time, p *part) {
	if b.isWaiting(p) {
		return
	}
	b.waiting = append(b.waiting, p)
	p.budgetWait = true
	b.observe(now)
}

func (b *memBudget) dequeue(now time.Time, p *part) {
	if !p.budgetWait {
		return
	}
	p.budgetWait = false
	for i, w := range b.waiting {
		if w == p {
			b.observe(now)
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			if len(b.waiting) == 0 {
				b.waitSince = time.Time{}
			}
			return
		}
	}
}
