package ledger

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/spoolmq/spool/internal/capconn"
)

// DefaultMaxReplyBytes bounds one reply of Redis (RedisOptions.MaxReplyBytes,
// redis.max_reply_bytes). The ledger's largest honest reply is one script's
// answer for MaxBatch keys, each with at most a 1 KiB last error: well
// under 1 MiB; 64 MiB leaves room for anything Redis itself may send.
const DefaultMaxReplyBytes = 64 << 20

// ErrReplyTooLarge is a Redis reply that declares (or sends) more than
// MaxReplyBytes: the connection is closed before the client allocates what
// the reply declares. A hostile or intercepted server can otherwise end
// the process with one header such as "$1000000000000".
var ErrReplyTooLarge = errors.New("redis reply over redis.max_reply_bytes")

// replyElemBytes is what go-redis allocates per element of an aggregate
// (an interface value) before any element arrives.
const replyElemBytes = 16

// respFrames follows RESP2/RESP3 framing, byte by byte, to know what each
// reply declares before the client reads it: it parses header lines only
// and counts, per top-level reply, the bytes the headers make the client
// allocate (bulk lengths, aggregate elements) and the bytes of lines.
// Pure: no I/O, fed with what the connection read.
type respFrames struct {
	max   int64
	line  []byte  // the header line read so far (at most maxHeaderLine)
	lineN int64   // bytes of the current line, for simple strings
	cr    bool    // the line's last byte was CR
	bulk  int64   // bytes of a bulk body (and its CRLF) still to pass
	stack []int64 // elements still due in each open aggregate
	total int64   // what the current top-level reply has cost
}

// maxHeaderLine bounds a header line kept for parsing: a type byte, a
// length of at most 20 digits and CRLF. Longer lines are simple strings,
// errors, numbers or doubles, counted but not kept.
const maxHeaderLine = 32

// feed takes the next bytes read from the connection. An error means the
// connection must be closed: the stream holds a reply over the limit or
// is not RESP.
// Feed follows the replies in p (capconn.Framer).
func (f *respFrames) Feed(p []byte) error {
	for len(p) > 0 {
		if f.bulk > 0 {
			n := min(int64(len(p)), f.bulk)
			f.bulk -= n
			p = p[n:]
			if f.bulk == 0 {
				f.elementDone()
			}
			continue
		}
		b := p[0]
		p = p[1:]
		f.lineN++
		if len(f.line) < maxHeaderLine {
			f.line = append(f.line, b)
		}
		if f.total+f.lineN > f.max {
			return fmt.Errorf("%w (%d bytes): a line of %d bytes", ErrReplyTooLarge, f.max, f.lineN)
		}
		if b != '\n' {
			f.cr = b == '\r'
			continue
		}
		if err := f.header(); err != nil {
			return err
		}
	}
	return nil
}

// header handles a complete line.
func (f *respFrames) header() error {
	line, cr := f.line, f.cr
	f.total += f.lineN
	f.line, f.lineN, f.cr = f.line[:0], 0, false
	if len(line) < 3 || !cr {
		return fmt.Errorf("%w: not a RESP header line", ErrBadReply)
	}
	switch line[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		f.elementDone()
		return nil
	}
	if len(line) >= maxHeaderLine {
		return fmt.Errorf("%w: RESP header of %d bytes", ErrBadReply, len(line))
	}
	n, ok := respLen(line[1 : len(line)-2])
	if !ok {
		return fmt.Errorf("%w: RESP header %q", ErrBadReply, line)
	}
	var elems int64
	switch line[0] {
	case '$', '!', '=':
		if n < 0 {
			f.elementDone()
			return nil
		}
		if n > f.max-f.total {
			return fmt.Errorf("%w (%d bytes): a string of %d bytes", ErrReplyTooLarge, f.max, n)
		}
		f.total += n + 2
		f.bulk = n + 2
		return nil
	case '*', '~', '>':
		elems = n
	case '%', '|':
		elems = 2 * n
	default:
		return fmt.Errorf("%w: RESP type %q", ErrBadReply, line[0])
	}
	if elems <= 0 {
		f.elementDone()
		return nil
	}
	if elems > (f.max-f.total)/replyElemBytes {
		return fmt.Errorf("%w (%d bytes): an aggregate of %d elements", ErrReplyTooLarge, f.max, elems)
	}
	f.total += elems * replyElemBytes
	if line[0] == '|' {
		// An attribute precedes the element it describes: it does not
		// take a place of its own. Marked by a negative count.
		f.stack = append(f.stack, -elems)
		return nil
	}
	f.stack = append(f.stack, elems)
	return nil
}

// elementDone ends one element: it fills a place of the innermost open
// aggregate, which may end it in turn; when none is open, the top-level
// reply has ended and the next one starts with nothing spent.
func (f *respFrames) elementDone() {
	for len(f.stack) > 0 {
		top := &f.stack[len(f.stack)-1]
		if *top < 0 {
			*top++
			if *top < 0 {
				return
			}
			// An attribute ended: the element it describes follows.
			f.stack = f.stack[:len(f.stack)-1]
			return
		}
		*top--
		if *top > 0 {
			return
		}
		f.stack = f.stack[:len(f.stack)-1]
	}
	f.total = 0
}

// respLen parses a header's decimal length: -1 (null) or more.
func respLen(b []byte) (int64, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		// Past 2^60 every length is over any limit: stop counting there,
		// so that no sum or product of lengths can overflow.
		n = min(n*10+int64(c-'0'), 1<<60)
	}
	return n, true
}

// cappedDialer is the client's dialer: TCP (then TLS when tc is set, with
// the address's host as the name to verify unless tc names one) and the
// reply cap above TLS, where the RESP bytes are.
func cappedDialer(timeout time.Duration, tc *tls.Config, maxReply int64, refused func()) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nd := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		var conn net.Conn
		var err error
		if tc != nil {
			conn, err = (&tls.Dialer{NetDialer: nd, Config: tc}).DialContext(ctx, network, addr)
		} else {
			conn, err = nd.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		c := capconn.New(conn, &respFrames{max: maxReply}, nil, refused)
		if sc, ok := conn.(syscall.Conn); ok {
			return sysCappedConn{c, sc}, nil
		}
		return c, nil
	}
}

// sysCappedConn is a plaintext capped connection that lets the client's pool
// peek at the socket (MSG_PEEK: nothing is consumed) to drop connections
// the server closed while idle, as it does for a bare TCP connection.
type sysCappedConn struct {
	*capconn.Conn
	sc syscall.Conn
}

func (c sysCappedConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
