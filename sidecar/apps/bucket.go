package apps

import (
	"math"
	"time"
)

// Bucket is a token bucket: it holds up to burst tokens and gains rate
// tokens per second. It has no clock and no lock: the caller passes the
// time and serialises calls (Gate does both).
//
// A request may take more tokens than the bucket holds: it passes once the
// bucket holds min(n, burst), and leaves the bucket in debt. So a batch
// larger than the burst is paced, never refused forever, and over time the
// rate holds whatever the batch sizes.
type Bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

// NewBucket returns a full bucket; rate must be > 0 and burst >= 1.
func NewBucket(rate, burst float64, now time.Time) *Bucket {
	return &Bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// refill adds what the time since the last call earned. A clock that went
// back earns nothing (and does not take away).
func (b *Bucket) refill(now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = math.Min(b.burst, b.tokens+d.Seconds()*b.rate)
		b.last = now
	}
}

// Take takes n tokens if the bucket holds min(n, burst) at now. When it
// does not, nothing is taken and wait says how long until it will (if no
// one else takes any).
func (b *Bucket) Take(now time.Time, n float64) (ok bool, wait time.Duration) {
	b.refill(now)
	need := math.Min(n, b.burst)
	if b.tokens >= need {
		b.tokens -= n
		return true, 0
	}
	return false, time.Duration(math.Ceil((need - b.tokens) / b.rate * float64(time.Second)))
}

// Tokens is what the bucket holds at now (negative while in debt).
func (b *Bucket) Tokens(now time.Time) float64 {
	b.refill(now)
	return b.tokens
}

// Return gives back n tokens taken at the same instant (a request refused
// by another bucket after this one admitted it).
func (b *Bucket) Return(n float64) { b.tokens = math.Min(b.burst, b.tokens+n) }
