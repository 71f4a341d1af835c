package kafka

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spoolmq/spool/engine"
)

// Calls that arrive while a topic's listing is in flight share the next
// one, sent once the first is answered; no call is answered from a
// listing sent before it began; a call alone sends its own.
func TestOffsetsCallsShareTheNextListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ob offsetsBatch
		var mu sync.Mutex
		sent := 0                      // listings sent
		release := make(chan struct{}) // holds the first listing in flight
		fill := func(l *offsetsListing) {
			mu.Lock()
			sent++
			n := sent
			mu.Unlock()
			if n == 1 {
				<-release
			}
			l.ends = kadm.ListedOffsets{"t": {0: {Topic: "t", Offset: int64(n)}}}
		}
		listed := func(l *offsetsListing) int64 { o, _ := l.ends.Lookup("t", 0); return o.Offset }

		first := make(chan int64, 1)
		go func() { first <- listed(ob.listing(fill)) }()
		synctest.Wait() // the first listing is in flight

		const later = 8
		got := make(chan int64, later)
		for range later {
			go func() { got <- listed(ob.listing(fill)) }()
		}
		synctest.Wait() // all of them wait: one for the first listing's answer, the rest for its own
		mu.Lock()
		if sent != 1 {
			t.Fatalf("%d listings sent while the first was in flight, want 1", sent)
		}
		mu.Unlock()

		close(release)
		if o := <-first; o != 1 {
			t.Fatalf("the first call got listing %d, want 1", o)
		}
		for range later {
			if o := <-got; o != 2 {
				t.Fatalf("a call that began while listing 1 was in flight got listing %d, want 2 (sent after it began, shared)", o)
			}
		}
		for want := int64(3); want <= 5; want++ {
			if o := listed(ob.listing(fill)); o != want {
				t.Fatalf("a call alone got listing %d, want its own, %d", o, want)
			}
		}
	})
}

// Offsets, called for every partition of a topic at once, each see what
// was produced before the call (one listing may answer many of them).
func TestOffsetsConcurrentAreFresh(t *testing.T) {
	b := open(t)
	const parts = 8
	if err := b.EnsureTopic(engine.TopicSpec{Name: "wide", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		for p := range int32(parts) {
			if _, err := produce(t, b, "wide", p, []engine.Record{rec("r", "", "v")}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, parts)
		for p := range int32(parts) {
			wg.Go(func() {
				start, end, err := b.Offsets("wide", p)
				if err == nil && (start != 0 || end != int64(round)) {
					err = fmt.Errorf("offsets of wide/%d = %d, %d; want 0, %d", p, start, end, round)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
