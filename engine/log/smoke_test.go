package log

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, Options{SegmentBytes: 4096, IndexIntervalBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	p, err := s.Partition("orders-3")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		base, err := p.Append(ctx, []Record{{Value: []byte(fmt.Sprint("v", i))}, {Key: []byte("k"), Value: []byte("x")}})
		if err != nil || base != int64(2*i) {
			t.Fatal(base, err)
		}
	}
	recs, err := p.Read(0, 100, p.DurableOffset(), nil)
	if err != nil || len(recs) == 0 || string(recs[0].Value) != "v0" {
		t.Fatal(recs, err)
	}
	recs, err = p.Read(151, 100000, p.DurableOffset(), nil)
	if err != nil || recs[0].Offset != 151 {
		t.Fatal(recs, err)
	}
	cancel()
	<-done
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(dir, Options{SegmentBytes: 4096, IndexIntervalBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	p, err = s.Partition("orders-3")
	if err != nil {
		t.Fatal(err)
	}
	if p.NextOffset() != 200 {
		t.Fatal(p.NextOffset())
	}
	recs, err = p.Read(199, 1, 1000, nil)
	if err != nil || len(recs) != 1 || recs[0].Offset != 199 {
		t.Fatal(recs, err)
	}
	s.Close()
}
