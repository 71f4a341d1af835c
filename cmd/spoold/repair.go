package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/spoolmq/spool/engine/embedded"
)

// repair runs `spoold repair --data-dir D --partition topic-N`: it truncates
// a quarantined partition to its last good offset (docs/operations.md). It
// returns the process exit code.
func repair(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spoold repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "the node's data_dir (spoold must be stopped)")
	partition := fs.String("partition", "", "the partition to repair, as named in the data dir and in the quarantine log line: <topic>-<n>")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: spoold repair --data-dir DIR --partition TOPIC-N")
		fmt.Fprintln(stderr, "Truncates a quarantined partition to its last good offset; records after the damage are dropped.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" || *partition == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	res, err := embedded.RepairPartition(embedded.Config{DataDir: *dataDir, Logger: logger}, *partition)
	if err != nil {
		fmt.Fprintln(stderr, "spoold repair:", err)
		return 1
	}
	if !res.Repaired {
		fmt.Fprintf(stdout, "spoold repair: %s: no damage found; nothing changed (it ends at offset %d)\n", *partition, res.End)
		return 0
	}
	fmt.Fprintf(stdout, "spoold repair: %s: truncated to offset %d (damage in %s at byte %d: %s); dropped %d bytes, %d later segment(s).\n",
		*partition, res.End, res.File, res.Position, res.Reason, res.BytesDropped, res.SegmentsRemoved)
	fmt.Fprintf(stdout, "The next message published gets offset %d. Consumer groups committed beyond it must be reset (ResetOffsets to latest) or they skip the new messages.\n", res.End)
	return 0
}
