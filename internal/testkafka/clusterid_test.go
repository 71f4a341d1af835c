package testkafka

import (
	"encoding/base64"
	"testing"
)

// A cluster id never starts with "-": kafka-storage format would take it
// for an option ("argument --cluster-id/-t: expected one argument"), as
// it did for one broker launch in 64. Among 4,096 ids about 64 would.
func TestClusterIDIsNotAnOption(t *testing.T) {
	for range 4096 {
		id := clusterID()
		b, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil || len(b) != 16 || id[0] == '-' {
			t.Fatalf("cluster id %q: %d bytes, %v; want 16 bytes in base64url, not starting with '-'", id, len(b), err)
		}
	}
}
