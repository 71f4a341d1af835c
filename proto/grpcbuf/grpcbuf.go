// Package grpcbuf gives spoold's gRPC servers and clients (and the Go SDK's)
// a buffer pool sized for its messages that does not zero what it hands
// out, and a proto codec that uses it and vtproto's generated code (Codec).
//
// grpc-go's default pool has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB,
// and zeroes a buffer when it hands it out: every message between 32 KiB
// and 1 MiB (a publish batch of a hundred 1 KiB messages, a raft append)
// took a 1 MiB buffer and cleared all of it — a sixth of a cluster node's
// CPU under publish load. These tiers double from 256 B to 8 MiB, so a
// buffer is at most twice the message; and even so, zeroing the buffers of
// the messages read and written was a tenth of a node's CPU under
// publish-rf3 (profile of 2026-12-01). gRPC uses a buffer from its pool only
// up to what it wrote into it — a frame read in full, a message marshalled,
// the bytes a read returned (grpc-go keeps a non-zeroing pool of its own for
// those paths, internal to it) — so this pool skips the zeroing.
//
// It imports only gRPC and protobuf-go, so that the engine, the sidecar and
// the SDK may: it lives in the module of the generated code it encodes
// (github.com/spoolmq/spool/proto), which the server and the Go SDK both
// require. It is no API for apps: it may change in any release.
package grpcbuf

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// The pool's buffer sizes are the powers of two from 2^minExp (256 B) to
// 2^maxExp (8 MiB).
const (
	minExp = 8
	maxExp = 23
)

// Pool is a tiered pool of byte buffers whose sizes are powers of two. Get
// returns a buffer of the length asked for, with stale bytes in it; a
// length above the largest tier is allocated and not kept.
type Pool struct {
	tiers [maxExp - minExp + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// New returns a new pool.
func New() *Pool { return &Pool{} }

// tier is the index of the smallest tier of at least n bytes, or -1.
func tier(n int) int {
	for e := minExp; e <= maxExp; e++ {
		if n <= 1<<e {
			return e - minExp
		}
	}
	return -1
}

// Get returns a buffer of length n (not zeroed).
func (p *Pool) Get(n int) *[]byte {
	i := tier(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.tiers[i].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<(i+minExp))
	return &b
}

// Put takes a buffer back; one whose capacity is not a tier's is dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if i := tier(c); i >= 0 && c == 1<<(i+minExp) {
		p.tiers[i].Put(b)
	}
}

// ServerOption makes a server use a new pool.
func ServerOption() grpc.ServerOption { return experimental.BufferPool(New()) }

// DialOption makes a client use a new pool.
func DialOption() grpc.DialOption { return experimental.WithBufferPool(New()) }
