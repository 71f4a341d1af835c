package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// callbackApp implements HandlerService: the app side of callback mode.
type callbackApp struct {
	spoolv1.UnimplementedHandlerServiceServer
	mu       sync.Mutex
	attempts map[string][]int32 // message id → attempts seen
	acked    map[string]bool
}

func (a *callbackApp) Handle(_ context.Context, req *spoolv1.HandleRequest) (*spoolv1.HandleResponse, error) {
	d := req.GetDelivery()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attempts[d.GetMessageId()] = append(a.attempts[d.GetMessageId()], d.GetAttempt())
	switch key := string(d.GetKey()); {
	case key == "flaky" && d.GetAttempt() == 1:
		return &spoolv1.HandleResponse{Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: "timeout talking to the provider"}, nil
	case key == "down" && d.GetAttempt() == 1:
		return nil, status.Error(codes.Unavailable, "provider down")
	case key == "bad":
		return &spoolv1.HandleResponse{Outcome: spoolv1.Outcome_OUTCOME_DEAD_LETTER, Reason: "malformed order"}, nil
	case key == "garbage" && d.GetAttempt() == 1:
		return &spoolv1.HandleResponse{}, nil // no outcome: the sidecar must treat it as a failed attempt
	}
	a.acked[d.GetMessageId()] = true
	return &spoolv1.HandleResponse{Outcome: spoolv1.Outcome_OUTCOME_ACK}, nil
}

// In callback mode the sidecar calls the app's Handle for each delivery,
// with the same semantics as a stream: ack, retry (also on UNAVAILABLE and
// on an answer without an outcome), dead-letter.
func TestCallbackMode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	appSrv := grpc.NewServer()
	app := &callbackApp{attempts: map[string][]int32{}, acked: map[string]bool{}}
	spoolv1.RegisterHandlerServiceServer(appSrv, app)
	go appSrv.Serve(l) //nolint:errcheck // ends with Stop below
	t.Cleanup(appSrv.Stop)

	n := startNode(t, fmt.Sprintf(`
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: mailer
    delivery: callback
    app_address: %q
    max_attempts: 3
    backoff: {base: 20ms, max: 100ms, multiplier: 2}
`, l.Addr().String()))
	c := n.client(context.Background())
	keys := []string{"a", "flaky", "b", "down", "bad", "garbage", "c"}
	ids := publishSeq(t, c, "orders", 0, len(keys), func(s int) string { return keys[s] })
	eventually(t, 20*time.Second, "all but the bad message acked", func() bool {
		app.mu.Lock()
		defer app.mu.Unlock()
		return len(app.acked) == len(ids)-1
	})
	app.mu.Lock()
	for i, id := range ids {
		want := 1
		if k := keys[i]; k == "flaky" || k == "down" || k == "garbage" {
			want = 2
		}
		if got := app.attempts[id]; len(got) != want || got[len(got)-1] != int32(want) {
			t.Errorf("key %s: attempts %v, want %d ending with attempt %d", keys[i], got, want, want)
		}
	}
	app.mu.Unlock()
	resp, err := n.adminClient().PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "mailer", Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetReason() != "malformed order" {
		t.Fatalf("dead letters = %v, want the bad message with reason %q", resp.GetEntries(), "malformed order")
	}
	if got := string(resp.GetEntries()[0].GetMessage().GetPayload()); got != strconv.Itoa(4) {
		t.Fatalf("dead letter payload %q, want the original %q", got, "4")
	}
}
