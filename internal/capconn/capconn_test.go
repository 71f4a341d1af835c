package capconn

import (
	"errors"
	"net"
	"testing"
)

// capAt refuses once more than max bytes have been fed.
type capAt struct{ fed, max int }

var errTooMuch = errors.New("too much")

func (c *capAt) Feed(p []byte) error {
	if c.fed += len(p); c.fed > c.max {
		return errTooMuch
	}
	return nil
}

// The pending bytes come first; what the framer takes passes; once it
// refuses, that read and every later one fail, the connection is closed
// and the refusal counted once.
func TestConnClosesOnRefusal(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	refusals := 0
	c := New(client, &capAt{max: 4}, []byte("hi"), func() { refusals++ })
	go func() { _, _ = server.Write([]byte("abcd")); _, _ = server.Write([]byte("e")) }()
	buf := make([]byte, 8)
	for _, want := range []string{"hi", "abcd"} {
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	for range 2 {
		if _, err := c.Read(buf); !errors.Is(err, errTooMuch) {
			t.Fatalf("read past the cap: %v", err)
		}
	}
	if refusals != 1 {
		t.Fatalf("%d refusals counted, want 1", refusals)
	}
	if _, err := server.Write([]byte("x")); err == nil {
		t.Fatal("the connection is still open")
	}
}
