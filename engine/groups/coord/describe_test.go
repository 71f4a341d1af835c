package coord

import (
	"fmt"
	"strings"
)

// describe prints a command for a test failure, without replica lists.
func describe(c Command) string {
	head := fmt.Sprintf("%s@%d ", c.Group, c.AtMs)
	switch {
	case c.Join != nil:
		var ts []string
		for _, t := range c.Join.Topics {
			ts = append(ts, fmt.Sprintf("%s(%d)", t.Name, t.Partitions))
		}
		return head + fmt.Sprintf("Join{%s session %s node %d topics %s timeouts %d/%d}", c.Join.Member, c.Join.Session, c.Join.Node, strings.Join(ts, ","), c.Join.SessionTimeoutMs, c.Join.RevokeTimeoutMs)
	case c.Heartbeat != nil:
		return head + fmt.Sprintf("Heartbeat%+v", *c.Heartbeat)
	case c.Leave != nil:
		return head + fmt.Sprintf("Leave%+v", *c.Leave)
	case c.Expire != nil:
		return head + fmt.Sprintf("Expire%+v", *c.Expire)
	case c.RevokeDone != nil:
		return head + fmt.Sprintf("RevokeDone%+v", *c.RevokeDone)
	case c.Commit != nil:
		return head + fmt.Sprintf("Commit%+v", *c.Commit)
	case c.Reset != nil:
		return head + fmt.Sprintf("Reset%+v", *c.Reset)
	case c.DropTopic != nil:
		return head + fmt.Sprintf("DropTopic%+v", *c.DropTopic)
	case c.Checkpoint != nil:
		return head + fmt.Sprintf("Checkpoint{chunk %d of %d as of %d}", c.Checkpoint.Chunk, c.Checkpoint.Chunks, c.Checkpoint.AsOf)
	default:
		return head + "(no command)"
	}
}
