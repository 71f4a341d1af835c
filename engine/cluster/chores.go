package cluster

import (
	"strconv"
	"time"

	"github.com/spoolmq/spool/engine/meta"
)

// When the member's chores run (docs/architecture.md, "Chores driven by
// change"). A round of chores (member.choresRound) reads the controller's
// state, this node's groups' leaders and memberships, and the peers'
// connections; with a thousand idle replicas a round walks them all, so
// rounds run only when one of those changed, when something left pending
// needs the clock (a move or a repair under way, a stopped replica's
// reopen, a peer not reached yet, a finalization's wait, a leadership
// hand-back asked), or when woken (choresWake). In between, the loop only
// compares the inputs: a few loads, no walk.

// choresInputs is what a round's decisions read that changes without the
// clock.
type choresInputs struct {
	state *meta.State // the controller's state: a new value for each batch applied
	roles uint64      // raft.HostStats.RoleChanges: leaders, memberships, stops, groups added or removed
	peers string      // the connected peers and the transport's handshakes (their Hello: versions spoken)
	// quarantines: Node.quarantines, partitions found damaged by a read
	// (one found by its replica stops it: a role change).
	quarantines uint64
}

// choresPending is what a round left to the clock.
type choresPending struct {
	// work: the next round has a step to take (stray data to delete, a
	// stopped replica to reopen, a repair, a move, an unreached peer whose
	// dead-node timeout runs).
	work bool
	// finalizeAt: a finalization waits until then (zero: none).
	finalizeAt time.Time
	// handBack: leaderships were asked to go back to their preferred
	// nodes; the next balance looks again.
	handBack bool
}

// choresPlan decides when rounds run; it has no clock and no I/O (its
// caller gives it the time and the inputs).
type choresPlan struct {
	every        time.Duration // the round interval while work is pending
	balanceEvery time.Duration // leadership balancing at most this often

	ranOnce  bool
	last     choresInputs
	deadline time.Time // zero: no round is due by the clock

	balanced      time.Time // the last round that balanced leaderships
	balancedRoles uint64    // the roles it saw
	handBack      bool      // it asked for hand-backs
}

// due: whether a round runs now (woken: choresWake fired).
func (p *choresPlan) due(in choresInputs, now time.Time, woken bool) bool {
	return !p.ranOnce || woken || in != p.last || (!p.deadline.IsZero() && !now.Before(p.deadline))
}

// balance: whether the round running now balances leaderships: the roles
// changed since the last balance (or it asked for hand-backs), and the
// last is balanceEvery old.
func (p *choresPlan) balance(in choresInputs, now time.Time) bool {
	return (in.roles != p.balancedRoles || p.handBack) && now.Sub(p.balanced) >= p.balanceEvery
}

// ran records a round run at now with in, and computes the next deadline.
func (p *choresPlan) ran(in choresInputs, now time.Time, balanced bool, pend choresPending) {
	p.ranOnce, p.last = true, in
	if balanced {
		p.balanced, p.balancedRoles, p.handBack = now, in.roles, pend.handBack
	}
	p.deadline = time.Time{}
	earliest := func(t time.Time) {
		if p.deadline.IsZero() || t.Before(p.deadline) {
			p.deadline = t
		}
	}
	if pend.work {
		earliest(now.Add(p.every))
	}
	if !pend.finalizeAt.IsZero() {
		earliest(pend.finalizeAt)
	}
	if p.handBack || in.roles != p.balancedRoles {
		earliest(p.balanced.Add(p.balanceEvery))
	}
}

// choresInputs reads the inputs now.
func (c *member) choresInputs() choresInputs {
	c.mu.Lock()
	in := choresInputs{state: c.state, quarantines: c.quarantines.Load()}
	c.mu.Unlock()
	in.roles = c.host.RoleChanges()
	var b []byte
	for _, nd := range in.state.Nodes() {
		if ps, ok := c.tr.Peer(nd.ID); ok && ps.Connected {
			b = strconv.AppendUint(append(b, ' '), nd.ID, 10)
		}
	}
	b = strconv.AppendUint(append(b, '/'), c.tr.Stats().Connects, 10)
	in.peers = string(b)
	return in
}

// choresPending reads what the round just run left to the clock.
func (c *member) choresPending(handBack bool) choresPending {
	c.mu.Lock()
	p := choresPending{work: c.straysDue || c.ccBusy || c.state.Moving() > 0, handBack: handBack}
	c.mu.Unlock()
	p.work = p.work || len(c.stops.episodes()) > 0 || len(c.repairs) > 0 || len(c.unreached) > 0
	if c.finalizeWant != 0 {
		p.finalizeAt = c.finalizeSince.Add(c.cfg.AutoFinalizeAfter)
	}
	return p
}
