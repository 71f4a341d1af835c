// Package capconn bounds what a remote server can make spoold allocate: a
// Conn hands every byte the server sends to a protocol's framer before the
// client library sees it, and closes the connection when the framer
// refuses (a reply or frame declaring more bytes than the cap). The
// client then fails only what was in flight on that connection and dials
// afresh. The Redis ledger (RESP) and the JetStream backend (the NATS
// protocol) wrap their connections in it.
package capconn

import (
	"net"
	"sync"
)

// Framer follows a protocol's framing over the bytes a server sends, and
// refuses what goes past its cap (or is not the protocol).
type Framer interface {
	Feed(p []byte) error
}

// Conn is a net.Conn whose reads pass through a Framer.
type Conn struct {
	net.Conn
	mu      sync.Mutex
	pending []byte // bytes the dialer read (and fed) before handing over
	framer  Framer
	err     error
	refused func()
}

// New wraps conn; pending are bytes already read from it (and fed to f)
// that the client must see first; refused, if set, counts a refusal.
func New(conn net.Conn, f Framer, pending []byte, refused func()) *Conn {
	return &Conn{Conn: conn, pending: pending, framer: f, refused: refused}
}

// Read reads from the connection; once the framer refuses, the connection
// is closed and this read and every later one fail with its error.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if ferr := c.framer.Feed(p[:n]); ferr != nil {
			c.err = ferr
			_ = c.Conn.Close()
			if c.refused != nil {
				c.refused()
			}
			return 0, ferr
		}
	}
	return n, err
}
