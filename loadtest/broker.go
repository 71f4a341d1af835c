package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spoolmq/spool/internal/testkafka"
	"github.com/spoolmq/spool/internal/testnats"
	"github.com/spoolmq/spool/internal/testport"
)

// broker is the message broker a scenario with `backend: jetstream` or
// `backend: kafka` runs spoold on (docs/backends.md): a nats-server with
// JetStream, or a single-node Apache Kafka in KRaft mode, on 127.0.0.1
// with its data in the run's temp dir, stopped at the end of the run.
type broker struct {
	storage string // the spoold config's storage section
	addr    string // where clients connect: nats://127.0.0.1:PORT, or Kafka's 127.0.0.1:PORT
	nats    *exec.Cmd
	natsEnd chan struct{}
	kafka   *testkafka.Broker
	pid     int
}

func startBroker(ctx context.Context, sc *Scenario, tmp string) (*broker, error) {
	backend := sc.Backend
	dir := filepath.Join(tmp, "broker")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	switch backend {
	case "jetstream":
		bin, err := testnats.Binary()
		if err != nil {
			return nil, fmt.Errorf("loadtest: nats-server: %w", err)
		}
		// Outside the ephemeral range: a port from listen(":0") may be
		// taken by an outgoing connection before nats-server binds it.
		ports, err := testport.Ports("127.0.0.1", 1)
		if err != nil {
			return nil, err
		}
		port := ports[0]
		logf, err := os.Create(filepath.Join(dir, "nats-server.log"))
		if err != nil {
			return nil, err
		}
		args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "store")}
		if sc.BrokerSync == "always" {
			// No flag sets it: a configuration file, merged with the flags.
			conf := filepath.Join(dir, "nats-server.conf")
			if err := os.WriteFile(conf, []byte("jetstream {\n  sync_interval: always\n}\n"), 0o644); err != nil {
				logf.Close()
				return nil, err
			}
			args = append([]string{"-c", conf}, args...)
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("loadtest: start nats-server: %w", err)
		}
		b := &broker{nats: cmd, natsEnd: make(chan struct{}), pid: cmd.Process.Pid, addr: fmt.Sprintf("nats://127.0.0.1:%d", port),
			storage: fmt.Sprintf("storage:\n  backend: jetstream\n  jetstream:\n    urls: [\"nats://127.0.0.1:%d\"]\n", port)}
		go func() { _ = cmd.Wait(); logf.Close(); close(b.natsEnd) }() // owned: ends with the process
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
			if err == nil {
				c.Close()
				return b, nil
			}
			if time.Now().After(deadline) {
				b.stop()
				return nil, fmt.Errorf("loadtest: nats-server not accepting connections on port %d after 20s", port)
			}
			time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
		}
	case "kafka":
		k, err := testkafka.Launch(dir)
		if err != nil {
			return nil, fmt.Errorf("loadtest: kafka: %w", err)
		}
		return &broker{kafka: k, pid: k.Pid(), addr: k.Addr(),
			storage: fmt.Sprintf("storage:\n  backend: kafka\n  kafka:\n    brokers: [%q]\n    create_topics: true\n", k.Addr())}, nil
	}
	return nil, fmt.Errorf("loadtest: backend %q: want embedded, jetstream or kafka", backend)
}

func (b *broker) stop() {
	if b.nats != nil {
		_ = b.nats.Process.Kill()
		<-b.natsEnd
	}
	if b.kafka != nil {
		b.kafka.Kill()
	}
}
