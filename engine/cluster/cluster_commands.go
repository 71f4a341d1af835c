package cluster

import (
	"fmt"

	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
)

// checkCommands refuses a payload a peer forwards (NodeService.Produce) for
// the log of a replicated state machine — raft group 0, the controller's,
// or a partition of the groups topic, the coordinators' — unless each of
// its records is a command that decodes and validates, as this node's own
// proposers check theirs (proposeMeta, coordinators.propose). Every node
// would skip such a record anyway (rsm); refusing it keeps it out of the
// log. Other payloads are not looked at.
func checkCommands(group uint64, topic string, payload []byte, maxBatchBytes int) error {
	var decode func([]byte) error
	switch {
	case group == controllerGroup:
		decode = func(b []byte) error { _, err := decodeControllerCommand(b); return err }
	case topic == meta.GroupsTopic:
		decode = func(b []byte) error { _, err := decodeCoordinatorCommand(b); return err }
	default:
		return nil
	}
	recs, err := log.RecordsOf(payload, maxBatchBytes, nil)
	if err != nil {
		return err
	}
	for i, r := range recs {
		if err := decode(r.Value); err != nil {
			return fmt.Errorf("record %d is no command of this log: %w", i, err)
		}
	}
	return nil
}

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
