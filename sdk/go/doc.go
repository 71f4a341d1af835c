// Package spool is the Go SDK for Spool: an application writes a Handler, and
// the SDK runs it against the local Spool sidecar (spoold).
//
//	err := spool.Subscribe(ctx, "", "billing", []string{"orders"},
//		func(ctx context.Context, m *spool.Message) error {
//			return charge(ctx, m.Payload) // nil = ACK, error = RETRY
//		})
//
// The SDK owns the Subscribe stream: it grants credit, runs handlers with a
// bounded concurrency, settles each delivery (ack, retry, dead-letter),
// extends leases of slow handlers, reconnects when the sidecar restarts, and
// drains on shutdown. Publishing is a unary call (Client.Publish,
// Client.PublishBatch) or pipelined over one stream (Client.Publisher).
//
// The package talks to the sidecar only through the public API in
// proto/spool/v1 (package spoolv1); it must never import the sidecar or the
// engine. docs/sdk-go.md is the user guide.
//
// Goroutines: every goroutine the package starts belongs to the Subscribe
// call or Publisher that started it and has ended when that call returns or
// Close returns.
package spool
