package log

import (
	"strings"
	"testing"
)

// A build without the fault modes (every production build) refuses their
// settings instead of ignoring them; a test build (-tags spoolfaults)
// takes them.
func TestFaultModesRefusedOutsideTestBuilds(t *testing.T) {
	for _, env := range []string{PowerLossEnv, SlowSyncEnv} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, t.TempDir()+"/fault")
			s, err := OpenStore(t.TempDir(), Options{})
			if err == nil {
				defer s.Close()
			}
			switch {
			case !FaultsBuilt && (err == nil || !strings.Contains(err.Error(), "-tags spoolfaults") || !strings.Contains(err.Error(), env)):
				t.Fatalf("a production build with %s set: %v, want a refusal naming it and the test builds", env, err)
			case FaultsBuilt && err != nil:
				t.Fatalf("a test build refused %s: %v", env, err)
			}
		})
	}
}
