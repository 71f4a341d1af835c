// Package grpcbuf gives spoold's gRPC servers and clients a buffer pool
// sized for its messages.
//
// grpc-go's default pool has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB,
// and zeroes a buffer when it hands it out: every message between 32 KiB
// and 1 MiB (a publish batch of a hundred 1 KiB messages, a raft append)
// took a 1 MiB buffer and cleared all of it — a sixth of a cluster node's
// CPU under publish load. These tiers double from 256 B to 8 MiB, so a
// buffer is at most twice the message.
//
// It imports only gRPC, so that both the engine and the sidecar may.
package grpcbuf

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// tierExponents are the pool's buffer sizes, as powers of two.
var tierExponents = []uint8{8, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}

// New returns a new pool.
func New() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(tierExponents...)
	if err != nil {
		panic("grpcbuf: " + err.Error()) // the exponents are constants
	}
	return p
}

// ServerOption makes a server use a new pool.
func ServerOption() grpc.ServerOption { return experimental.BufferPool(New()) }

// DialOption makes a client use a new pool.
func DialOption() grpc.DialOption { return experimental.WithBufferPool(New()) }
