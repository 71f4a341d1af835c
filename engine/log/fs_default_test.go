package log

import (
	"strings"
	"testing"
)

// A build without the fault modes (every production build) refuses their
// setting instead of ignoring it; a test build (-tags spoolfaults) takes it.
func TestFaultModesRefusedOutsideTestBuilds(t *testing.T) {
	t.Setenv(PowerLossEnv, t.TempDir()+"/journal")
	s, err := OpenStore(t.TempDir(), Options{})
	if err == nil {
		defer s.Close()
	}
	switch {
	case !FaultsBuilt && (err == nil || !strings.Contains(err.Error(), "-tags spoolfaults")):
		t.Fatalf("a production build with %s set: %v, want a refusal naming the test builds", PowerLossEnv, err)
	case FaultsBuilt && err != nil:
		t.Fatalf("a test build refused %s: %v", PowerLossEnv, err)
	}
}
