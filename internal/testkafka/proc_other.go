//go:build !linux

package testkafka

import "os/exec"

// setDeathSignal: only Linux has a parent-death signal.
func setDeathSignal(*exec.Cmd) {}
