package tracker

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkAddNextAck measures one message's way through the tracker on the
// hot path: Add, Next, Ack, with a steady window of in-flight messages
// spread over 1,000 keys. One op = one message.
func BenchmarkAddNextAck(b *testing.B) {
	for _, o := range []Ordering{OrderKey, OrderNone} {
		b.Run(o.String(), func(b *testing.B) {
			const inFlight = 256
			tr, err := New[[]byte](Config{Ordering: o, MaxInFlight: inFlight, Rand: half}, 0)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(i)
			}
			payload := []byte("payload")
			now := t0
			var ds []Delivery[[]byte]
			type out struct {
				off int64
				tok uint64
			}
			fifo := make([]out, inFlight) // deliveries awaiting their ack, oldest first
			head, n := 0, 0
			var off int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tr.Add(now, Record[[]byte]{Offset: off, Key: keys[off%int64(len(keys))], Value: payload}); err != nil {
					b.Fatal(err)
				}
				off++
				ds = tr.Next(now, 1, ds[:0])
				for _, d := range ds {
					fifo[(head+n)%inFlight] = out{d.Offset, d.Token}
					n++
				}
				if n == inFlight { // the app acks the oldest
					o := fifo[head]
					head, n = (head+1)%inFlight, n-1
					if err := tr.Ack(now, o.off, o.tok); err != nil {
						b.Fatal(err)
					}
				}
				now = now.Add(time.Microsecond)
			}
		})
	}
}
