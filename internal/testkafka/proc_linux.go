package testkafka

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the broker if the test binary dies first.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
