package ledger

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
)

// fakeRedis is a TCP stand-in that speaks just enough RESP to answer each
// command with what reply(name) returns: a hostile or intercepted server.
type fakeRedis struct {
	ln    net.Listener
	reply atomic.Value // func(cmd string) string
	wg    sync.WaitGroup
}

func startFakeRedis(t *testing.T, reply func(cmd string) string) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{ln: ln}
	f.reply.Store(reply)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeRedis) addr() string { return f.ln.Addr().String() }

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		args, err := readCommand(r)
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, f.reply.Load().(func(string) string)(strings.ToUpper(args[0]))); err != nil {
			return
		}
	}
}

func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || line[0] != '*' || n < 1 || n > 1000 {
		return nil, errors.New("not a command")
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimSpace(h[1:]))
		if err != nil || l < 0 || l > 1<<20 {
			return nil, errors.New("bad bulk")
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:l])
	}
	return args, nil
}

// honest answers HELLO as a server without it (the client falls back to
// RESP2) and PING; the ledger's scripts get what giveScript returns.
func honest(giveScript string) func(string) string {
	return func(cmd string) string {
		switch cmd {
		case "HELLO":
			return "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			return "+PONG\r\n"
		case "EVALSHA", "EVAL":
			return giveScript
		}
		return "+OK\r\n"
	}
}

// TestRedisHugeReplyDeclaredIsRefused: a reply that declares a huge
// string or array (at start, to HELLO; mid-delivery, to a script) fails
// its call with ErrReplyTooLarge and the process allocates nothing near
// it (before the cap, go-redis allocated the declared size and the
// runtime ended the process: "fatal error: runtime: out of memory"). The
// next honest reply is answered again: one reply affects only itself.
func TestRedisHugeReplyDeclaredIsRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		hello, script string
	}{
		"bulk at start":         {hello: "$1000000000000\r\n"},
		"array at start":        {hello: "*10000000000000\r\n"},
		"bulk mid-delivery":     {script: "$1000000000000\r\n"},
		"array mid-delivery":    {script: "*10000000000000\r\n"},
		"map mid-delivery":      {script: "%4611686018427387903\r\n"},
		"nested arrays":         {script: "*3\r\n*3000000\r\n*3000000\r\n"},
		"endless simple string": {script: "+" + strings.Repeat("x", 2<<20)},
	} {
		t.Run(name, func(t *testing.T) {
			reply := func(cmd string) string {
				if cmd == "HELLO" && tc.hello != "" {
					return tc.hello
				}
				return honest(tc.script)(cmd)
			}
			f := startFakeRedis(t, reply)
			var refused atomic.Int64
			r, err := NewRedis(RedisOptions{Addrs: []string{f.addr()}, MaxReplyBytes: 1 << 20, OnReplyRefused: func() { refused.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = r.Claim(ctx, "g", "o", time.Now(), time.Hour, []Claim{{ID: "m1"}})
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), ErrReplyTooLarge.Error()) {
				t.Fatalf("Claim err = %v, want %v", err, ErrReplyTooLarge)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
				t.Errorf("the call allocated %d bytes", got)
			}
			if refused.Load() != 1 {
				t.Errorf("refusals counted = %d, want 1", refused.Load())
			}
			// The next connection meets an honest server.
			f.reply.Store(honest("*1\r\n*3\r\n:1\r\n:1\r\n:0\r\n"))
			if err := r.Ping(ctx); err != nil {
				t.Fatalf("Ping after a refused reply: %v", err)
			}
		})
	}
}

// TestRespFramesHonestReplies: replies a real server sends, nested,
// split at every byte, pass under a limit they fit, and each top-level
// reply starts afresh (many replies of half the limit in a row pass).
func TestRespFramesHonestReplies(t *testing.T) {
	big := strings.Repeat("v", 400)
	replies := "+OK\r\n+" + big + "\r\n-ERR " + big + "\r\n:12\r\n$-1\r\n*-1\r\n_\r\n,1.5\r\n#t\r\n" +
		"*2\r\n$3\r\nabc\r\n*2\r\n:1\r\n-ERR x\r\n" +
		"%1\r\n+k\r\n$400\r\n" + big + "\r\n" +
		"|1\r\n+a\r\n+b\r\n*1\r\n:1\r\n" +
		"*0\r\n~1\r\n=7\r\ntxt:abc\r\n>2\r\n+m\r\n!3\r\nERR\r\n"
	for round := range 3 {
		f := respFrames{max: 1024}
		for rep := range 20 {
			for i := 0; i < len(replies); i++ {
				if err := f.Feed([]byte{replies[i]}); err != nil {
					t.Fatalf("round %d rep %d byte %d: %v", round, rep, i, err)
				}
			}
		}
		if len(f.stack) != 0 || f.bulk != 0 || f.total != 0 {
			t.Fatalf("after whole replies: stack %v bulk %d total %d", f.stack, f.bulk, f.total)
		}
	}
	f := respFrames{max: 1024}
	if err := f.Feed([]byte("$1025\r\n")); !errors.Is(err, ErrReplyTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	f = respFrames{max: 1024}
	if err := f.Feed([]byte("?x\r\n")); !errors.Is(err, ErrBadReply) {
		t.Fatalf("unknown type: %v", err)
	}
}

// TestRedisRealServerThroughTheCap: the ledger's own replies from a real
// Redis pass a limit far below the default.
func TestRedisRealServerThroughTheCap(t *testing.T) {
	s := testredis.Start(t)
	r, err := NewRedis(RedisOptions{Addrs: []string{s.Addr()}, MaxReplyBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	claims := make([]Claim, MaxBatch)
	for i := range claims {
		claims[i] = Claim{ID: "m" + strconv.Itoa(i)}
	}
	res, err := r.Claim(ctx, "g", "o", time.Now(), time.Hour, claims)
	if err != nil || len(res) != len(claims) {
		t.Fatalf("Claim: %d results, %#v", len(res), err)
	}
}

// TestRedisIdleConnectionClosedByServer: the reply cap keeps the pool's
// check of idle plaintext connections (a peek at the socket), so the first
// call after Redis restarted while the ledger was idle succeeds instead
// of failing on the dead connection.
func TestRedisIdleConnectionClosedByServer(t *testing.T) {
	srv := testredis.Start(t)
	r := newTestRedis(t, srv.Addr())
	if err := claimOne(r, t, "a"); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Restart()
	if err := claimOne(r, t, "b"); err != nil {
		t.Fatalf("first call after a restart: %v", err)
	}
}
