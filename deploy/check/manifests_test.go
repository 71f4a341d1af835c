package check

import (
	"os"
	"testing"
)

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

// The example manifests decode strictly, their pods are coherent and
// spoold accepts the configuration of every pod.
func TestExampleManifests(t *testing.T) {
	checkWorkloads(t, readManifests(t, "../kubernetes/*.yaml"))
}
