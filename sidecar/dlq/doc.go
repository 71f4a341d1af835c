// Package dlq reads a subscription's dead-letter topic (Peek, Summarize),
// redrives its entries (Redrive) and purges them (Purge).
//
// Redrive moves entries back to the original partition of the original
// topic, marked so that only the group that dead-lettered them delivers
// them, with their ledger entries reset so that they get max_attempts
// fresh attempts — unless the ledger shows the message was handled since.
//
// # Paging and what is indexed
//
// Every read goes through a reader bounded per partition of the
// dead-letter topic. Its start is the highest of: the log start, the
// subscription's purge mark, the offset the log's time index gives for
// the filter's from time (less IndexSlack), and the caller's cursor. Its
// stop is the end the first page saw, or the offset the time index gives
// for the filter's to time (plus IndexSlack). So a time range costs what
// the range holds, not what the topic holds, and a call reads at most
// ScanRecordsPerCall records before returning a cursor to go on.
//
// Reason, key, attempt count, group and original topic are not indexed:
// they are checked on each record of the range as it is read. A filter on
// them alone reads the range, one bounded page per call.
//
// The cursor is opaque to clients (cursor.go): the next offset and the
// stop of each partition.
package dlq
