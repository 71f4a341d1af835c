package engine

import (
	fnv1a "hash/fnv"
	"testing"
)

// The key partitioner is fixed: changing it would move keys between
// partitions and break per-key order for existing data.
func TestPartitionForKeyIsStable(t *testing.T) {
	// Golden values: FNV-1a 64 of the key (a published constant and the
	// standard library's implementation), modulo the partition count.
	golden := []struct {
		key  string
		n    int32
		want int32
	}{{"a", 8, int32(0xaf63dc4c8601ec8c % 8)}, {"order-42", 12, int32(fnv("order-42") % 12)}, {"", 3, int32(0xcbf29ce484222325 % 3)}}
	for _, g := range golden {
		if got := PartitionForKey([]byte(g.key), g.n); got != g.want {
			t.Errorf("PartitionForKey(%q, %d) = %d, want %d", g.key, g.n, got, g.want)
		}
	}
}

// fnv is the standard library's FNV-1a, an independent implementation.
func fnv(s string) uint64 {
	h := fnv1a.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
