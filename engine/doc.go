// Package engine is the sidecar's way into the partitioned log: topics,
// produce, fetch, change notification and committed group positions.
//
// Every call names a (topic, partition) and works the same whether the
// partition is stored on this node or led by a peer: Produce is asynchronous
// and may complete with ErrNotLeader (retry at the named leader) or
// ErrOutcomeUnknown (the append may or may not have happened: retry with the
// same message ids). Today one node stores every partition (engine/log);
// replication (engine/raft) keeps this API.
//
// The engine imports no Redis, no Prometheus and nothing from the sidecar;
// it reports what operators need through the Hooks interface.
package engine
