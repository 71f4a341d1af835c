package cluster

import (
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/meta"
)

// decodeControllerCommand reads one record of group 0's log: a command
// that decodes and validates (Command.Validate depends on the bytes alone,
// so every node reads the same record the same way).
func decodeControllerCommand(b []byte) (meta.Command, error) {
	c, err := meta.DecodeCommand(b)
	if err == nil {
		err = c.Validate()
	}
	return c, err
}

// decodeCoordinatorCommand reads one record of a partition of the groups
// topic, as decodeControllerCommand does.
func decodeCoordinatorCommand(b []byte) (coord.Command, error) {
	c, err := coord.DecodeCommand(b)
	if err == nil {
		err = c.Validate()
	}
	return c, err
}
