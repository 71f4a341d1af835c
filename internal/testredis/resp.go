package testredis

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ioTimeout bounds one command exchange of the harness.
const ioTimeout = 2 * time.Second

// do sends one command on a fresh connection (TLS when tc is not nil) and
// reads one RESP2 reply.
func do(addr string, tc *tls.Config, args ...string) (any, error) {
	d := &net.Dialer{Timeout: ioTimeout}
	var c net.Conn
	var err error
	if tc != nil {
		tc = tc.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		c, err = tls.DialWithDialer(d, "tcp", addr, tc)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

// replyError is an error reply of the server.
type replyError string

func (e replyError) Error() string { return string(e) }

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("bad reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, replyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("bad array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := readReply(r)
			var re replyError
			if err != nil && !errors.As(err, &re) {
				return nil, err
			}
			if err != nil {
				v = err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line)
}
