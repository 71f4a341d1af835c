package injector

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start real HTTPS servers and clients: none may outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
