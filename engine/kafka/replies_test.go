package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// listen starts a TCP listener whose connections serve runs on; closed at
// the test's end, with every connection.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readFrame reads one Kafka frame (a 4-byte size, then that many bytes).
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 1<<20 {
		return nil, errors.New("request too large for the test")
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return body, err
}

// allocated is the bytes the process has allocated so far.
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// A hostile or intercepted broker answers a request with a frame that
// declares a huge size (Kafka's size is an int32: 2 GiB is the most it can
// declare, no 1 TB): the connection is closed without allocating it, the
// call fails with an error naming guards.kafka_max_reply_bytes, and the
// refusal is counted. franz-go alone refuses only above its own 100 MiB:
// a 64 MiB declaration was allocated before reading a byte of it.
func TestKafkaHugeReplyDeclaredIsRefused(t *testing.T) {
	for _, declared := range []uint32{1<<31 - 1, 64 << 20} {
		addr := listen(t, func(c net.Conn) {
			for {
				if _, err := readFrame(c); err != nil {
					return
				}
				var size [4]byte
				binary.BigEndian.PutUint32(size[:], declared)
				if _, err := c.Write(append(size[:], 0, 0, 0, 1)); err != nil { // the size, then a correlation id, then nothing
					return
				}
			}
		})
		var refused atomic.Int64
		before := allocated()
		start := time.Now()
		b, err := Open(Config{Brokers: []string{addr}, MaxReplyBytes: 8 << 20, Hooks: Hooks{ReplyRefused: func() { refused.Add(1) }}})
		if err == nil {
			b.Close()
			t.Fatalf("declared %d: Open succeeded against a broker that answers nothing else", declared)
		}
		grew := allocated() - before
		t.Logf("declared %d: %v after %v, %d refusals counted, %d MiB allocated", declared, err, time.Since(start).Round(time.Millisecond), refused.Load(), grew>>20)
		if !strings.Contains(err.Error(), "guards.kafka_max_reply_bytes") {
			t.Errorf("declared %d: %v; want an error naming guards.kafka_max_reply_bytes", declared, err)
		}
		if refused.Load() == 0 {
			t.Errorf("declared %d: no refusal counted", declared)
		}
		if grew > 32<<20 {
			t.Errorf("declared %d: %d MiB allocated while refusing", declared, grew>>20)
		}
	}
}

// proxy forwards connections to the broker at to; armed, it replaces the
// size of the next reply it forwards with a huge one and closes that
// connection, as an intercepting hop would.
type proxy struct {
	to    string
	armed atomic.Bool
}

func (p *proxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.to)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }() // ends when either side closes
	var size [4]byte
	for {
		if _, err := io.ReadFull(up, size[:]); err != nil {
			return
		}
		if p.armed.CompareAndSwap(true, false) {
			binary.BigEndian.PutUint32(size[:], 1<<31-1)
			_, _ = c.Write(size[:])
			return
		}
		if _, err := c.Write(size[:]); err != nil {
			return
		}
		if _, err := io.CopyN(c, up, int64(binary.BigEndian.Uint32(size[:]))); err != nil {
			return
		}
	}
}

// Mid-delivery, one hostile reply fails the call it answers, with an error
// naming the guard, and is counted; the backend reconnects and the next
// fetch and produce succeed.
func TestKafkaHugeReplyMidFetch(t *testing.T) {
	p := &proxy{to: needBroker(t).Addr()}
	via := listen(t, p.serve)
	var refused atomic.Int64
	b := open(t, func(c *Config) {
		c.MaxReplyBytes = 8 << 20
		c.Hooks.ReplyRefused = func() { refused.Add(1) }
		c.dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, via) // every broker through the proxy
		}
	})
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := produce(t, b, "orders", 0, []engine.Record{rec("a", "k", "1")}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Fetch("orders", 0, 0, 1<<20, nil); err != nil || len(got) != 1 {
		t.Fatalf("fetch before: %d records, %v", len(got), err)
	}
	before := allocated()
	p.armed.Store(true)
	_, err := b.Fetch("orders", 0, 0, 1<<20, nil)
	t.Logf("the fetch answered by a huge reply: %v", err)
	if p.armed.Load() {
		t.Fatal("the fetch sent no request through the proxy")
	}
	// franz-go retries on a new connection, so the fetch itself may
	// succeed; what must hold is the refusal, counted, without allocating.
	if err != nil && !strings.Contains(err.Error(), "guards.kafka_max_reply_bytes") {
		t.Errorf("fetch answered by a huge reply: %v; want success after a retry, or an error naming guards.kafka_max_reply_bytes", err)
	}
	if refused.Load() != 1 {
		t.Errorf("%d refusals counted, want 1", refused.Load())
	}
	if grew := allocated() - before; grew > 32<<20 {
		t.Errorf("%d MiB allocated while refusing", grew>>20)
	}
	if _, err := produce(t, b, "orders", 0, []engine.Record{rec("b", "k", "2")}); err != nil {
		t.Fatalf("produce after the refusal: %v", err)
	}
	if got, err := b.Fetch("orders", 0, 0, 1<<20, nil); err != nil || len(got) != 2 {
		t.Fatalf("fetch after the refusal: %d records, %v; want 2", len(got), err)
	}
}
