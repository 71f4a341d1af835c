package engine

// PartitionForKey maps a non-empty key to a partition of a topic with n
// partitions: FNV-1a (64 bit) of the key bytes, modulo n. It is stable across
// releases and nodes: changing it would move keys between partitions and
// break per-key order, so it never changes. SDKs never compute it; the
// sidecar does. Adding partitions to a topic moves keys (as in any
// partitioned log): a key's order is kept only while the count is unchanged.
func PartitionForKey(key []byte, n int32) int32 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for _, c := range key {
		h ^= uint64(c)
		h *= prime64
	}
	return int32(h % uint64(n))
}
