package deliver

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// cancelledHandler answers as a gRPC client does when its context ends: a
// status error with code Canceled, which wraps no context error.
type cancelledHandler struct{}

func (cancelledHandler) Handle(ctx context.Context, _ *spoolv1.HandleRequest, _ ...grpc.CallOption) (*spoolv1.HandleResponse, error) {
	<-ctx.Done()
	return nil, status.Error(codes.Canceled, "context canceled")
}

// Defect 10: a Handle call cut short by the sidecar's own shutdown hands
// the message back (RELEASE), it is not a failed attempt.
func TestCallbackCancelledByShutdownIsARelease(t *testing.T) {
	g := &Group{cfg: GroupConfig{Handler: cancelledHandler{}}, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := g.callHandle(ctx, &spoolv1.Delivery{Topic: tTopic, LeaseDeadlineMs: 1 << 50})
	if got := req.GetNacks()[0].GetOutcome(); got != spoolv1.Outcome_OUTCOME_RELEASE {
		t.Fatalf("outcome %v, want OUTCOME_RELEASE", got)
	}
}
