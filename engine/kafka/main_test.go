package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/testkafka"
)

// broker is the package's one Kafka broker, started by TestMain (a broker
// takes seconds to start); each test works under a prefix of its own.
// brokerErr says why there is none.
var (
	broker    *testkafka.Broker
	brokerErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spool-kafka-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	broker, brokerErr = testkafka.Launch(dir)
	code := m.Run()
	if broker != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "kafka broker log (tail):\n%s\n", broker.LogTail(40))
		}
		broker.Kill()
	}
	os.RemoveAll(dir)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// needBroker is the package's broker, or skips (no Kafka on this machine)
// or fails (Kafka did not start).
func needBroker(t *testing.T) *testkafka.Broker {
	t.Helper()
	if errors.Is(brokerErr, testkafka.ErrUnavailable) {
		t.Skip(brokerErr)
	}
	if brokerErr != nil {
		t.Fatal(brokerErr)
	}
	return broker
}

var notTopicChars = regexp.MustCompile(`[^a-zA-Z0-9._-]`)

// prefixes holds each running test's prefix: the broker outlives a test,
// and a test run again in the same process (go test -count=N) must not see
// the topics and groups of its previous run.
var prefixes struct {
	sync.Mutex
	of  map[*testing.T]string
	seq int
}

// prefix is a test's own prefix of Kafka topics and groups, the same for
// every call within one run of the test.
func prefix(t *testing.T) string {
	prefixes.Lock()
	defer prefixes.Unlock()
	if p, ok := prefixes.of[t]; ok {
		return p
	}
	if prefixes.of == nil {
		prefixes.of = map[*testing.T]string{}
	}
	prefixes.seq++
	p := fmt.Sprintf("%s.%d.", notTopicChars.ReplaceAllString(t.Name(), "_"), prefixes.seq)
	prefixes.of[t] = p
	t.Cleanup(func() {
		prefixes.Lock()
		delete(prefixes.of, t)
		prefixes.Unlock()
	})
	return p
}

// open opens a backend on the package's broker under the test's prefix,
// running it until the test ends.
func open(t *testing.T, mutate ...func(*Config)) *Backend {
	t.Helper()
	cfg := Config{Brokers: []string{needBroker(t).Addr()}, Prefix: prefix(t), CreateTopics: true, PublishTimeout: 10 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// produce appends recs and waits for the result.
func produce(t *testing.T, b *Backend, topic string, p int32, recs []engine.Record) (int64, error) {
	t.Helper()
	type result struct {
		base int64
		err  error
	}
	res := make(chan result, 1)
	b.Produce(topic, p, recs, func(base int64, err error) { res <- result{base, err} })
	select {
	case r := <-res:
		return r.base, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("produce did not complete in 30s")
		return 0, nil
	}
}

func rec(id, key, value string, headers ...engine.Header) engine.Record {
	return engine.Record{ID: []byte(id), Key: []byte(key), Value: []byte(value), Headers: headers}
}
