package spool_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

func TestPublishReturnsResult(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	res, err := e.client.Publish(ctx, "orders", []byte("order-1"), []byte(`{"total":12}`),
		spool.WithID("ord-1"), spool.WithHeaders(map[string]string{"a": "1"}), spool.WithHeader("b", "2"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != "ord-1" || res.Offset != 0 {
		t.Fatalf("result = %+v", res)
	}
	res2, err := e.client.Publish(ctx, "orders", nil, []byte("x"))
	if err != nil || res2.Offset != 1 || res2.ID == "" {
		t.Fatalf("second publish = %+v, %v", res2, err)
	}
	p := e.side.Record().Published[0]
	if string(p.GetKey()) != "order-1" || p.GetHeaders()["a"] != "1" || p.GetHeaders()["b"] != "2" {
		t.Fatalf("published = %v", p)
	}
}

func TestPublishBatch(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	rs, err := e.client.PublishBatch(ctxT(t), "orders", []spool.OutMessage{{ID: "a", Payload: []byte("1")}, {Payload: []byte("2")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "a" || rs[1].Offset != 1 {
		t.Fatalf("results = %+v", rs)
	}
}

func TestPublishErrorsSayWhatToDo(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	if _, err := e.client.Publish(ctxT(t), "", nil, []byte("x")); err == nil || !strings.Contains(err.Error(), "name the topic") {
		t.Fatalf("err = %v", err)
	}
	c, err := spool.Dial(ctxT(t), "127.0.0.1:1", spool.WithConnectTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Publish(ctxT(t), "orders", nil, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "is spoold running at 127.0.0.1:1") {
		t.Fatalf("err = %v", err)
	}
}

func TestPublisherPipelines(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	p := e.client.Publisher(ctx, "orders", spool.WithMaxInFlight(8))
	var fs []*spool.Future
	for i := 0; i < 100; i++ {
		fs = append(fs, p.Publish(nil, []byte(fmt.Sprint(i)), spool.WithID(fmt.Sprint("id-", i))))
	}
	var mu sync.Mutex
	var cbs []spool.PublishResult
	done := make(chan struct{})
	p.PublishFunc(nil, []byte("cb"), func(r spool.PublishResult, err error) {
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		cbs = append(cbs, r)
		mu.Unlock()
		close(done)
	})
	for i, f := range fs {
		r, err := f.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.ID != fmt.Sprint("id-", i) || r.Offset != int64(i) {
			t.Fatalf("future %d = %+v", i, r)
		}
	}
	<-done
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if cbs[0].Offset != 100 {
		t.Fatalf("callback result = %+v", cbs[0])
	}
	if f := p.Publish(nil, []byte("late")); f != nil {
		if _, err := f.Wait(ctx); err == nil || !strings.Contains(err.Error(), "publisher closed") {
			t.Fatalf("publish after Close: %v", err)
		}
	}
}

func TestPublisherFailsWhenSidecarGoes(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	ctx := ctxT(t)
	p := e.client.Publisher(ctx, "orders")
	defer p.Close()
	if _, err := p.Publish(nil, []byte("1")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	e.side.Stop()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := p.Publish(nil, []byte("2")).Wait(wctx)
	if err == nil || !strings.Contains(err.Error(), "same WithID") && !strings.Contains(err.Error(), "spoold running") {
		t.Fatalf("err = %v", err)
	}
}
