package testrelease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// The data-dir fixtures (docs/upgrading.md, "Data dirs"): a data dir each
// release's spoold wrote, in each mode a node runs in, committed with what
// it holds, so that every later build is shown to open it. A fixture is
// written by WriteFixture (go run ./internal/testrelease/datadirs) and
// checked by sidecar/e2e TestDataDirsOfEveryRelease.

// Modes are the kinds of node a fixture is made by: a single node (the log
// format, the single-node groups' offsets file, the dead-letter topic) and
// a one-member cluster (the node's identity, raft state and snapshots, the
// controller and the groups' coordinators in raft groups).
var Modes = []string{"single", "cluster"}

// Fixture topics and group: orders is consumed by the group; trimmed has
// lost its first segments to retention (in a cluster that leaves a raft
// snapshot beside the log).
const (
	FixtureTopic   = "orders"
	FixtureGroup   = "billing"
	FixtureTrimmed = "trimmed"
)

// Partition is what a partition of a fixture holds: the message ids from
// its start offset on, in offset order.
type Partition struct {
	Start int64    `json:"start"`
	IDs   []string `json:"ids"`
}

// Expect is what a fixture's data dir holds (expect.json beside it).
type Expect struct {
	Release string `json:"release"`
	Mode    string `json:"mode"`
	// Records are the orders topic's partitions.
	Records map[int32]Partition `json:"records"`
	// Trimmed is the trimmed topic's one partition.
	Trimmed Partition `json:"trimmed"`
	// Dead are the ids the group dead-lettered, sorted.
	Dead []string `json:"dead"`
	// Pending are the ids published after the group's last commit, sorted:
	// the group's next deliveries, and no others.
	Pending []string `json:"pending"`
}

// Config is the spoold.yaml of a fixture of mode, for its data dir and
// addresses (peer: the cluster listener, unused by a single node).
func Config(mode, dataDir, app, admin, peer string) string {
	cluster := ""
	if mode == "cluster" {
		cluster = fmt.Sprintf("cluster:\n  insecure: true\n  insecure_no_join_secret: true\n  replication_factor: 1\n  listen: %q\n", peer)
	}
	return fmt.Sprintf(`node:
  id: f1
  data_dir: %s
  app_listen: [%q]
  admin_listen: %q
  drain_timeout: 5s
apps:
  allow_insecure_tcp: true
admin:
  insecure_no_auth: true
storage:
  segment_bytes: 1048576
%stopics:
  - name: %s
    partitions: 2
  - name: %s
    partitions: 1
    retention_bytes: 1
subscriptions:
  - topic: %s
    group: %s
    ordering: key
    max_attempts: 2
    backoff: {base: 10ms, max: 50ms, multiplier: 2}
`, dataDir, app, admin, cluster, FixtureTopic, FixtureTrimmed, FixtureTopic, FixtureGroup)
}

// fixtureDead are the ids the fixture's handler dead-letters.
var fixtureDead = []string{"o-05", "o-17"}

// WriteFixture runs bin (release's spoold) in mode on dataDir with the
// addresses given, publishes and consumes the fixture's messages, stops it
// with SIGTERM and returns what the data dir holds. log receives spoold's
// output.
func WriteFixture(ctx context.Context, release, bin, mode, dataDir, cfgPath string, addrs [3]string, log io.Writer) (Expect, error) {
	exp := Expect{Release: release, Mode: mode, Dead: fixtureDead}
	if err := os.WriteFile(cfgPath, []byte(Config(mode, dataDir, addrs[0], addrs[1], addrs[2])), 0o644); err != nil {
		return exp, err
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return exp, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := AwaitReady(ctx, addrs[1], 30*time.Second); err != nil {
		return exp, err
	}
	c, err := spool.Dial(ctx, addrs[0])
	if err != nil {
		return exp, err
	}
	defer c.Close()
	publish := func(prefix string, n int) ([]string, error) {
		var ids []string
		for i := range n {
			id := fmt.Sprintf("%s-%02d", prefix, i)
			if _, err := c.Publish(ctx, FixtureTopic, fmt.Appendf(nil, "k%d", i%4), fmt.Appendf(nil, "payload %s", id),
				spool.WithID(id), spool.WithHeader("n", fmt.Sprint(i))); err != nil {
				return nil, fmt.Errorf("publish %s: %w", id, err)
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
	handled, err := publish("o", 40)
	if err != nil {
		return exp, err
	}
	if err := consumeAll(ctx, c, handled); err != nil {
		return exp, err
	}
	if exp.Pending, err = publish("p", 10); err != nil {
		return exp, err
	}
	if err := fillTrimmed(ctx, c, addrs[1]); err != nil {
		return exp, err
	}
	if exp.Records, err = ReadTopic(ctx, addrs[1], FixtureTopic); err != nil {
		return exp, err
	}
	trimmed, err := ReadTopic(ctx, addrs[1], FixtureTrimmed)
	if err != nil {
		return exp, err
	}
	exp.Trimmed = trimmed[0]
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		return exp, fmt.Errorf("spoold after SIGTERM: %w", err)
	}
	return exp, nil
}

// consumeAll handles ids in the fixture's group, dead-lettering
// fixtureDead, until each was handled, then stops the subscription (its
// drain commits the group's offsets).
func consumeAll(ctx context.Context, c *spool.Client, ids []string) error {
	var mu sync.Mutex
	seen := map[string]bool{}
	all := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(sctx, FixtureGroup, []string{FixtureTopic}, func(_ context.Context, m *spool.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if !seen[m.ID] {
				seen[m.ID] = true
				if len(seen) == len(ids) {
					close(all)
				}
			}
			if slices.Contains(fixtureDead, m.ID) {
				return spool.DeadLetter("fixture: dead-lettered on purpose")
			}
			return nil
		})
	}()
	select {
	case <-all:
	case err := <-done:
		return fmt.Errorf("subscription ended: %v", err)
	case <-time.After(60 * time.Second):
		return errors.New("not every message handled within 60 s")
	}
	stop()
	return <-done
}

// fillTrimmed publishes 400 KiB messages to the trimmed topic until
// retention has given up its first segment (1 MiB segments, checked every
// 10 s).
func fillTrimmed(ctx context.Context, c *spool.Client, admin string) error {
	payload := make([]byte, 400<<10)
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		if i < 8 {
			id := fmt.Sprintf("t-%02d", i)
			if _, err := c.Publish(ctx, FixtureTrimmed, nil, payload, spool.WithID(id)); err != nil {
				return fmt.Errorf("publish %s: %w", id, err)
			}
			continue
		}
		ps, err := ReadTopic(ctx, admin, FixtureTrimmed)
		if err != nil {
			return err
		}
		if ps[0].Start > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("retention did not trim the trimmed topic within 60 s")
		}
		time.Sleep(500 * time.Millisecond) // polling retention, which runs every 10 s
	}
}

// AwaitReady waits up to d for admin's /readyz to answer 200.
func AwaitReady(ctx context.Context, admin string, d time.Duration) error {
	deadline := time.Now().Add(d)
	hc := http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("spoold at %s not ready within %v (%v)", admin, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling a process's readiness
		}
	}
}

// ReadTopic reads topic's message ids per partition through admin's
// AdminService (Tail from the earliest offset up to the ends ListTopics
// gives).
func ReadTopic(ctx context.Context, admin, topic string) (map[int32]Partition, error) {
	conn, err := grpc.NewClient("passthrough:///"+admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ac := spoolv1.NewAdminServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lt, err := ac.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		return nil, err
	}
	out := map[int32]Partition{}
	want := 0
	for _, ti := range lt.GetTopics() {
		for _, p := range ti.GetPartitions() {
			if ti.GetName() == topic {
				out[p.GetPartition()] = Partition{Start: p.GetStartOffset(), IDs: []string{}}
				want += int(p.GetEndOffset() - p.GetStartOffset())
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no topic %q", topic)
	}
	if want == 0 {
		return out, nil
	}
	st, err := ac.Tail(ctx, &spoolv1.TailRequest{Topic: topic, From: &spoolv1.TailRequest_Earliest{Earliest: true}})
	if err != nil {
		return nil, err
	}
	for got := 0; got < want; {
		ev, err := st.Recv()
		if err != nil {
			return nil, err
		}
		rec := ev.GetRecord()
		if rec == nil {
			continue
		}
		p := out[rec.GetPartition()]
		if next := p.Start + int64(len(p.IDs)); rec.GetOffset() != next {
			return nil, fmt.Errorf("%s/%d: offset %d where %d was next", topic, rec.GetPartition(), rec.GetOffset(), next)
		}
		p.IDs = append(p.IDs, rec.GetId())
		out[rec.GetPartition()] = p
		got++
	}
	return out, nil
}

// DeadLetters lists the fixture group's dead letters' ids, sorted.
func DeadLetters(ctx context.Context, admin string) ([]string, error) {
	conn, err := grpc.NewClient("passthrough:///"+admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := spoolv1.NewAdminServiceClient(conn).PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Group: FixtureGroup, Topic: FixtureTopic, Limit: 100})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range resp.GetEntries() {
		ids = append(ids, e.GetMessage().GetMessageId())
	}
	slices.Sort(ids)
	return ids, nil
}
