package raft

import (
	"testing"

	"github.com/spoolmq/spool/internal/rapidreplay"
)

// TestRapidFailFilesReplay: every fail file under testdata/rapid still
// replays its case, and the case passes (see package rapidreplay).
func TestRapidFailFilesReplay(t *testing.T) { rapidreplay.Check(t) }
