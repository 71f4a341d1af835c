// Package publish serves spool.v1.PublisherService: it checks each message
// against the sidecar's limits, picks its partition (engine.PartitionForKey
// for keyed messages, a rotating partition per request for keyless ones),
// gives it an id when the producer did not, and answers once the engine
// reports the messages durable. It reaches the log only through the Engine
// interface, which works the same when a partition is led by a peer.
package publish
