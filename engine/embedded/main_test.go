package embedded

import (
	"testing"

	"go.uber.org/goleak"
)

// The engine starts goroutines (completers, go done for unknown topics):
// every one must end once its work is done.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
