package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a run leaves producers, consumers, samplers
// or the spoold waiter running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
