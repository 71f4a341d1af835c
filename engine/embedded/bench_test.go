package embedded

import (
	"testing"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// BenchmarkRecordTime is the lag gauge's read: the append time of the first
// unfinished record of a lagging partition, here in the middle of a batch of
// about 1 MiB (defect 7: this used to read, check and decode the batch).
func BenchmarkRecordTime(b *testing.B) {
	n := runNode(b, b.TempDir(), log.Options{}, "t")
	recs := make([]engine.Record, 1000)
	for i := range recs {
		recs[i] = engine.Record{Value: make([]byte, 1000)}
	}
	for range 4 {
		res := make(chan error, 1)
		n.Produce("t", 0, recs, func(_ int64, err error) { res <- err })
		if err := <-res; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := n.RecordTime("t", 0, int64(2500+i%400)); err != nil {
			b.Fatal(err)
		}
	}
}
