package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/internal/redact"

	"github.com/spoolmq/spool/internal/capconn"
)

// DefaultMaxFrameBytes bounds one frame a NATS server sends (Config.MaxFrameBytes,
// guards.nats_max_frame_bytes): NATS's largest max_payload (64 MiB) and
// room for a message's subject, reply and headers.
const DefaultMaxFrameBytes = 64<<20 + 1<<20

// ErrFrameTooLarge is a NATS frame that declares (or sends) more than
// MaxFrameBytes. nats.go allocates what a MSG line declares before the
// payload arrives, so a hostile or intercepted server could otherwise end
// the process with one line such as "MSG a 1 1000000000000".
var ErrFrameTooLarge = errors.New("NATS frame over guards.nats_max_frame_bytes")

// natsFrames follows the NATS client protocol as the server speaks it: a
// control line, and after MSG or HMSG the payload the line declares. Pure:
// fed with what the connection read.
type natsFrames struct {
	max     int64
	line    []byte
	payload int64 // payload bytes (and CRLF) still to pass
}

// Feed follows the frames in p (capconn.Framer).
func (f *natsFrames) Feed(p []byte) error {
	for len(p) > 0 {
		if f.payload > 0 {
			n := min(int64(len(p)), f.payload)
			f.payload -= n
			p = p[n:]
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			f.line = append(f.line, p...)
			p = nil
		} else {
			f.line = append(f.line, p[:i+1]...)
			p = p[i+1:]
		}
		if int64(len(f.line)) > f.max {
			return fmt.Errorf("%w (%d bytes): a control line of %d bytes", ErrFrameTooLarge, f.max, len(f.line))
		}
		if i < 0 {
			continue
		}
		n, err := msgSize(f.line)
		f.line = f.line[:0]
		if err != nil {
			return err
		}
		if n > f.max {
			return fmt.Errorf("%w (%d bytes): a message of %d bytes", ErrFrameTooLarge, f.max, n)
		}
		if n > 0 {
			f.payload = n + 2
		}
	}
	return nil
}

// msgSize is the payload size a MSG or HMSG line declares (the last
// field: HMSG's total of headers and payload), 0 for other lines.
func msgSize(line []byte) (int64, error) {
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return 0, nil
	}
	op := strings.ToUpper(fields[0])
	if op != "MSG" && op != "HMSG" {
		return 0, nil
	}
	n, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
	if err != nil || n < 0 || len(fields) < 4 {
		return 0, fmt.Errorf("jetstream: NATS server sent a malformed %s line", op)
	}
	return n, nil
}

// cappedDialer is nats.go's dialer: it reads the server's INFO itself,
// does TLS when the server or the URL asks for it (verifying the server's
// name), and puts the frame cap above TLS, where the protocol is. nats.go
// is told to skip its own TLS handshake (SkipTLSHandshake).
type cappedDialer struct {
	timeout  time.Duration
	maxFrame int64
	tlsHosts map[string]bool // host:port given with a tls:// URL: all servers are TLS then
	refused  func()
}

func (d *cappedDialer) SkipTLSHandshake() bool { return true }

func (d *cappedDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	_ = raw.SetReadDeadline(time.Now().Add(d.timeout))
	info, err := readInfo(raw)
	if err != nil {
		raw.Close()
		return nil, err
	}
	var conn net.Conn = raw
	var ti struct {
		TLSRequired bool `json:"tls_required"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(info[len("INFO "):]), &ti); err != nil {
		raw.Close()
		return nil, fmt.Errorf("jetstream: NATS server at %s sent a malformed INFO", address)
	}
	// One tls:// URL makes every server TLS, those the cluster announces
	// included (nats.go's own rule): no server is reached in plaintext
	// because it says it does not need TLS.
	if ti.TLSRequired || len(d.tlsHosts) > 0 {
		host, _, _ := net.SplitHostPort(address)
		tc := tls.Client(raw, &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host})
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		conn = tc
	}
	_ = raw.SetReadDeadline(time.Time{})
	return capconn.New(conn, &natsFrames{max: d.maxFrame}, info, d.refused), nil
}

// maxInfoBytes bounds the INFO line read at connect.
const maxInfoBytes = 1 << 20

// readInfo reads the server's first line, which must be INFO, byte by
// byte (nothing after it may be consumed: TLS may follow).
func readInfo(c net.Conn) ([]byte, error) {
	r := bufio.NewReaderSize(oneByteReader{c}, 16)
	var line []byte
	for len(line) < maxInfoBytes {
		b, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		line = append(line, b)
		if b == '\n' {
			if !bytes.HasPrefix(bytes.ToUpper(line), []byte("INFO ")) {
				return nil, errors.New("jetstream: the server's first line is not INFO")
			}
			return line, nil
		}
	}
	return nil, fmt.Errorf("%w: an INFO line over %d bytes", ErrFrameTooLarge, maxInfoBytes)
}

// oneByteReader reads at most one byte a call.
type oneByteReader struct{ c net.Conn }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.c.Read(p)
}

// tlsHostsOf are the host:port of URLs given as tls://.
func tlsHostsOf(urls []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range urls {
		for _, one := range strings.Split(s, ",") {
			u, err := url.Parse(strings.TrimSpace(one))
			if err == nil && u.Scheme == "tls" {
				m[u.Host] = true
			}
		}
	}
	return m
}

// RedactURLs returns urls with any password or token left out
// (nats://user:xxxxx@host:4222, nats://xxxxx@host:4222), for logs and
// errors.
func RedactURLs(urls []string) []string { return redact.URLs(urls) }

// redactErr returns err, or when its text holds a URL of urls with
// credentials, an error whose text has them redacted.
func redactErr(err error, urls []string) error {
	msg := err.Error()
	red := msg
	for _, u := range urls {
		for _, one := range strings.Split(u, ",") {
			one = strings.TrimSpace(one)
			red = strings.ReplaceAll(red, one, redact.URL(one))
		}
	}
	if red == msg {
		return err
	}
	return errors.New(red)
}
