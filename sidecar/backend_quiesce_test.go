package sidecar

import (
	"testing"

	"github.com/spoolmq/spool/sidecar/config"
)

// cluster.quiesce is on unless set to false, and reaches the engine.
func TestClusterConfigQuiesce(t *testing.T) {
	off := false
	for _, c := range []struct {
		set     *bool
		wantOff bool
	}{{nil, false}, {&off, true}} {
		cc, err := clusterConfig(&config.Config{Cluster: config.ClusterConfig{Quiesce: c.set}})
		if err != nil {
			t.Fatal(err)
		}
		if cc.QuiesceOff != c.wantOff {
			t.Errorf("cluster.quiesce %v: QuiesceOff %v, want %v", c.set, cc.QuiesceOff, c.wantOff)
		}
	}
}
