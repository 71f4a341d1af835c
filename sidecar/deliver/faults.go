package deliver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Faults makes a subscription deliver as an unreliable network would, so
// that an application's test suite can prove its handler idempotent
// (docs/semantics.md, "Testing a handler"). Each field is the probability,
// per delivery or per ack, of one kind of fault; every draw comes from one
// generator seeded with Seed, so a run with the same events replays the
// same faults. The sidecar's configuration refuses it outside node.dev and
// node.fault_injection.
//
// Faults never break a guarantee beyond what a network could: with
// ordering key a key's next message still waits for the one before it is
// settled, a fault never counts an attempt (so it never dead-letters a
// message), and nothing is lost.
type Faults struct {
	// Duplicate: a delivery is sent twice. The first settlement of the
	// two is applied; the other is dropped without a reply.
	Duplicate float64
	// LoseAck: an ack is dropped, as if it never arrived: the message is
	// delivered again (same attempt number) although the app did its work.
	LoseAck float64
	// Delay: a delivery ready to go is held back up to DelayMax first,
	// while other keys' messages overtake it.
	Delay    float64
	DelayMax time.Duration
	// EarlyLeaseExpiry: a delivery's lease ends within its first quarter
	// instead of at the deadline the app was told. As with a real expiry
	// the attempt counts, and the app's late ack is still applied unless
	// the message was delivered again meanwhile.
	EarlyLeaseExpiry float64
	Seed             uint64
}

// MaxFaultProbability bounds each fault's probability: a fault that
// always fires would deliver a message forever.
const MaxFaultProbability = 0.5

// DefaultFaultDelayMax is Faults.DelayMax when Delay is set and it is not.
const DefaultFaultDelayMax = 100 * time.Millisecond

func (f *Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"duplicate", f.Duplicate}, {"lose_ack", f.LoseAck}, {"delay", f.Delay}, {"early_lease_expiry", f.EarlyLeaseExpiry}} {
		if !(p.v >= 0 && p.v <= MaxFaultProbability) {
			return fmt.Errorf("faults.%s %v: a probability between 0 and %v", p.name, p.v, MaxFaultProbability)
		}
	}
	if f.DelayMax < 0 {
		return errors.New("faults.delay_max: a duration of 0 or more")
	}
	if f.DelayMax == 0 {
		f.DelayMax = DefaultFaultDelayMax
	}
	return nil
}

// faultKind names a kind of fault in spool_faults_injected_total{kind}.
type faultKind string

const (
	faultDuplicate        faultKind = "duplicate"
	faultLoseAck          faultKind = "lose_ack"
	faultDelay            faultKind = "delay"
	faultEarlyLeaseExpiry faultKind = "early_lease_expiry"
)

// faulter draws a subscription's faults. It is part of the machine: its
// generator is an input (seeded), not a clock or a source of entropy.
type faulter struct {
	cfg Faults
	rng *rand.Rand
}

func newFaulter(f *Faults) *faulter {
	if f == nil {
		return nil
	}
	return &faulter{cfg: *f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x5f0015))}
}

// fires draws whether a fault of probability p happens (no draw at 0, so
// that enabling one kind does not change another's sequence needlessly).
func (f *faulter) fires(p float64) bool { return f != nil && p > 0 && f.rng.Float64() < p }

// fault counts one injected fault of kind on s.
func (m *machine) fault(s *sub, kind faultKind) {
	m.count(metricKey{id: metFaultsInjected, l1: s.cfg.Topic, l2: string(kind)}, 1)
}

// delayed decides whether a delivery taken from a tracker is held back:
// then it returns when it is offered again.
func (s *sub) delayed(now time.Time) (time.Time, bool) {
	f := s.faults
	if f == nil || !f.fires(f.cfg.Delay) {
		return time.Time{}, false
	}
	return now.Add(1 + time.Duration(f.rng.Int64N(int64(f.cfg.DelayMax)))), true
}

// earlyDeadline decides whether a delivery's lease ends early: then it
// returns the new deadline, within the first quarter of the lease.
func (s *sub) earlyDeadline(now time.Time) (time.Time, bool) {
	f := s.faults
	if f == nil || !f.fires(f.cfg.EarlyLeaseExpiry) {
		return time.Time{}, false
	}
	quarter := max(int64(s.cfg.Tracker.VisibilityTimeout/4), 1)
	return now.Add(1 + time.Duration(f.rng.Int64N(quarter))), true
}

// injectSendFaults draws the faults of a delivery just added to c's frame:
// its lease may end early, and it may be sent twice. The copy takes a
// credit, as any delivery does, and goes in the same frame (so that a
// frame that cannot be queued hands back both): without a credit or room
// in the frame it is not made.
func (m *machine) injectSendFaults(now time.Time, c *consumer, cd *candidate, d *spoolv1.Delivery) {
	s := cd.s
	if dl, ok := s.earlyDeadline(now); ok {
		if _, err := cd.p.tr.Extend(now, cd.d.Offset, cd.d.Token, dl); err == nil {
			m.fault(s, faultEarlyLeaseExpiry)
		}
	}
	room := c.maxFrameBytes == 0 || c.frameBytes+wireBytes(d) <= c.maxFrameBytes
	if c.credit > 0 && room && s.faults.fires(s.faults.cfg.Duplicate) {
		c.credit--
		if c.dups == nil {
			c.dups = map[refKey]uint64{}
		}
		c.dups[refKey{s.cfg.Topic, cd.p.num, cd.d.Offset}] = cd.wire
		m.frameAdd(c, s, d)
		m.fault(s, faultDuplicate)
	}
}

// duplicateSettled reports whether a settlement is of the second copy of a
// duplicated delivery (its first copy was settled already): it is dropped,
// as the sidecar would drop a copy the network made. A delivery still
// outstanding, or whose lease expired (a late ack is applied), has had no
// settlement yet.
func (m *machine) duplicateSettled(c *consumer, k refKey, wire uint64) bool {
	w, ok := c.dups[k]
	if !ok || w != wire {
		return false
	}
	if o, out := c.outstanding[k]; out && o.wire == wire {
		return false
	}
	if o, late := m.expired[k]; late && o.wire == wire {
		return false
	}
	delete(c.dups, k)
	return true
}

// loseAck decides whether the ack of o is lost: the delivery then goes back
// uncounted and is delivered again at once, as after a lost ack (without
// the wait for its lease). A late ack (the lease expired) is not lost.
func (m *machine) loseAck(now time.Time, c *consumer, s *sub, p *part, k refKey, o sent) bool {
	if o.expired || !s.faults.fires(s.faults.cfg.LoseAck) {
		return false
	}
	if p.tr.Defer(now, k.offset, o.token, now) != nil {
		return false
	}
	delete(c.outstanding, k)
	m.probeLost(now, s, o)
	m.ledgerRelease(s, o, "", true)
	m.fault(s, faultLoseAck)
	return true
}
