// Package groups stores consumer groups' committed offsets.
//
// A committed position is what the delivery tracker reports: the lowest offset
// of a partition not yet finished, plus the offsets above it that are finished
// already (acked out of order). Restoring both on restart means a restart
// redelivers only what was really unfinished.
//
// This single-node store keeps one small file per (group, topic), replaced
// atomically (write to a temporary file, fdatasync, rename, fsync the
// directory); new directories are fsynced in their parent. All file access
// goes through engine/log's FS layer, so the in-memory MemFS can crash it. Replication moves these records into an internal offsets topic
// behind the same Store API. The package imports nothing from the sidecar.
package groups
