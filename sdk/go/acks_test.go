package spool_test

import (
	"fmt"
	"testing"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

// WithAcks reaches the sidecar: Publish sends ACKS_LEADER for AcksLeader
// and leaves acks unset (ALL) otherwise; a Publisher never puts messages
// of different acks in one request, and keeps their order.
func TestPublishWithAcks(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("leader"), spool.WithAcks(spool.AcksLeader)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("default")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("all"), spool.WithAcks(spool.AcksAll)); err != nil {
		t.Fatal(err)
	}
	p := e.client.Publisher(ctx, "orders")
	var fs []*spool.Future
	want := map[string]spoolv1.Acks{"leader": spoolv1.Acks_ACKS_LEADER, "default": spoolv1.Acks_ACKS_UNSPECIFIED, "all": spoolv1.Acks_ACKS_UNSPECIFIED}
	for i := range 60 {
		v, opts := fmt.Sprint("p", i), []spool.PublishOption(nil)
		want[v] = spoolv1.Acks_ACKS_UNSPECIFIED
		if i%7 < 3 {
			opts = append(opts, spool.WithAcks(spool.AcksLeader))
			want[v] = spoolv1.Acks_ACKS_LEADER
		}
		fs = append(fs, p.Publish(nil, []byte(v), opts...))
	}
	for i, f := range fs {
		r, err := f.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != int64(3+i) {
			t.Fatalf("message p%d at offset %d, want %d (order kept)", i, r.Offset, 3+i)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	rec := e.side.Record()
	if len(rec.Published) != len(want) || len(rec.PublishAcks) != len(rec.Published) {
		t.Fatalf("%d published, %d acks, want %d", len(rec.Published), len(rec.PublishAcks), len(want))
	}
	for i, m := range rec.Published {
		if got := rec.PublishAcks[i]; got != want[string(m.GetPayload())] {
			t.Fatalf("%s was sent with acks %v, want %v", m.GetPayload(), got, want[string(m.GetPayload())])
		}
	}
}
