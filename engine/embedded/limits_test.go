package embedded

import (
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// The batch limit derived from the sidecar's limits admits a maximal
// message (most headers, longest id, every byte of max_message_bytes) and
// its dead letter with up to DeadLetterHeadroomBytes of added headers.
func TestMaxBatchBytesForAdmitsMaximalDeadLetter(t *testing.T) {
	const maxMsg, maxID, maxHeaders = 5 << 20, 1024, 1024
	n := runNode(t, t.TempDir(), log.Options{MaxBatchBytes: engine.MaxBatchBytesFor(maxMsg, maxID, maxHeaders)}, "t")
	rec := engine.Record{ID: make([]byte, maxID), Key: make([]byte, 100)}
	used := len(rec.Key)
	for i := range maxHeaders {
		h := engine.Header{Key: fmt.Sprintf("h%04d", i), Value: make([]byte, 10)}
		rec.Headers = append(rec.Headers, h)
		used += len(h.Key) + len(h.Value)
	}
	rec.Value = make([]byte, maxMsg-used)
	// What a dead letter adds: headers totalling the headroom with their framing.
	dead := rec
	dead.Headers = append([]engine.Header(nil), rec.Headers...)
	for i := range 4 {
		dead.Headers = append(dead.Headers, engine.Header{Key: fmt.Sprintf("spool-dlq-%d", i), Value: make([]byte, engine.DeadLetterHeadroomBytes/4-64)})
	}
	for _, r := range []engine.Record{rec, dead} {
		res := make(chan error, 1)
		n.Produce("t", 0, []engine.Record{r}, func(_ int64, err error) { res <- err })
		if err := await(t, res, 10*time.Second, "produce"); err != nil {
			t.Fatalf("a message the limits allow is refused: %v", err)
		}
	}
	if got := engine.MaxBatchBytesFor(1<<20, 128, 64); got != log.DefaultMaxBatchBytes {
		t.Fatalf("small limits give %d, want the log default %d", got, log.DefaultMaxBatchBytes)
	}
}
