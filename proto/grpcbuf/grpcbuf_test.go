package grpcbuf

import "testing"

// Get hands out buffers of the length asked for in the smallest tier that
// holds it; Put keeps only buffers of a tier's size.
func TestPoolTiers(t *testing.T) {
	p := New()
	for _, c := range []struct{ n, wantCap int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {100 << 10, 128 << 10}, {8 << 20, 8 << 20}, {8<<20 + 1, 8<<20 + 1},
	} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", c.n, len(*b), cap(*b), c.n, c.wantCap)
		}
		p.Put(b)
	}
	odd := make([]byte, 300)
	p.Put(&odd) // not a tier's size: dropped, never handed out
	for range 100 {
		if b := p.Get(300); cap(*b) != 512 {
			t.Fatalf("Get(300) handed out a buffer of capacity %d", cap(*b))
		}
	}
	// A buffer put back shorter than it was handed out is reused whole.
	b := p.Get(1000)
	*b = (*b)[:10]
	p.Put(b)
	if c := p.Get(1024); len(*c) != 1024 || cap(*c) != 1024 {
		t.Fatalf("Get(1024) after a short Put: len %d cap %d", len(*c), cap(*c))
	}
}
