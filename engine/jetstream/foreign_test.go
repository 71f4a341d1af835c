package jetstream

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/testnats"
)

// A message on a partition's subject that is no Spool record is read as an
// undecodable record in its place (raw bytes, an id from its coordinates,
// engine.HeaderUndecodable saying what was wrong), and the records around
// it are read as they are: the partition goes on.
func TestForeignMessageReadAsUndecodable(t *testing.T) {
	srv := testnats.Start(t)
	b := open(t, srv.URL())
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := produce(t, b, "orders", 0, []engine.Record{rec("a", "k", "1")}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request("t.orders.0", []byte("not a spool record"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := produce(t, b, "orders", 0, []engine.Record{rec("c", "k", "3")}); err != nil {
		t.Fatal(err)
	}
	got, err := b.Fetch("orders", 0, 0, 1<<20, nil)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if len(got) != 3 || string(got[0].ID) != "a" || string(got[2].ID) != "c" || got[2].Offset != 2 {
		t.Fatalf("fetched %+v; want a, the foreign message, c", got)
	}
	u := got[1]
	if u.Offset != 1 || string(u.ID) != "jetstream:0:1" || !bytes.Equal(u.Value, []byte("not a spool record")) ||
		len(u.Headers) != 1 || u.Headers[0].Key != engine.HeaderUndecodable || !strings.Contains(string(u.Headers[0].Value), "did not write") {
		t.Fatalf("the foreign message read as %+v", u)
	}
}

// The permissions docs/backends.md gives ("Keep other publishers off
// Spool's subjects", with prefix t): spoold under them creates topics,
// publishes, reads and commits positions; another user can publish to
// neither a partition's subject nor the positions bucket.
func TestDocumentedNATSPermissions(t *testing.T) {
	srv := testnats.StartConfig(t, `authorization {
  users = [
    { user: spoold, password: s3cret,
      permissions: { publish: ["t.>", "$KV.t_positions.>", "$KV.t_groups.>", "$JS.API.>"],
                     subscribe: ["_INBOX.>"] } }
    { user: other, password: other,
      permissions: { publish: { allow: [">"], deny: ["t.>", "$KV.t_positions.>", "$KV.t_groups.>", "$JS.API.>"] },
                     subscribe: { allow: [">"], deny: ["t.>", "$KV.t_positions.>", "$KV.t_groups.>"] } } }
  ]
}
`)
	url := strings.Replace(srv.URL(), "nats://", "nats://spoold:s3cret@", 1)
	b := open(t, url)
	if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := produce(t, b, "orders", 0, []engine.Record{rec("a", "k", "1")}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Fetch("orders", 0, 0, 1<<20, nil); err != nil || len(got) != 1 {
		t.Fatalf("fetch as spoold: %d records, %v", len(got), err)
	}
	if err := b.CommitPositions("workers", "orders", map[int32]engine.Position{0: {Next: 1}}); err != nil {
		t.Fatalf("commit as spoold: %v", err)
	}

	denied := make(chan error, 4)
	nc, err := nats.Connect(strings.Replace(srv.URL(), "nats://", "nats://other:other@", 1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range []string{"t.orders.0", "$KV.t_positions.workers/orders", "$JS.API.STREAM.PURGE.t_orders_0"} {
		if err := nc.Publish(subj, []byte("not a spool record")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-denied:
			if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Fatalf("publish to %s: %v, want a permissions violation", subj, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("publish to %s by another user was not refused", subj)
		}
	}
	if _, end, err := b.Offsets("orders", 0); err != nil || end != 1 {
		t.Fatalf("the partition's end is %d (%v), want 1: another user's message was stored", end, err)
	}
}
