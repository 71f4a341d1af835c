package route

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/internal/testport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// view is a node's view of one group: whether it leads, the leader it knows.
type view struct {
	leads  bool
	leader uint64
}

func router(self uint64, v *view) *Router {
	return &Router{Self: self, Tick: time.Millisecond, Status: func(uint64) (bool, uint64, bool) { return v.leads, v.leader, true }}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A refusal's hint is followed: node 2 does not lead and names node 3,
// which is asked next and answers.
func TestDoFollowsTheLeaderHint(t *testing.T) {
	var asked []uint64
	err := router(1, &view{leader: 2}).Do(timeout(t, 5*time.Second), Call{
		Group: 7, Holders: []uint64{1, 2, 3},
		Local: func(context.Context) error { t.Fatal("ran here, which does not lead"); return nil },
		Remote: func(_ context.Context, node uint64) error {
			asked = append(asked, node)
			if node == 2 {
				return &raft.NotLeaderError{Group: 7, Leader: 3}
			}
			return nil
		},
	})
	if err != nil || len(asked) != 2 || asked[0] != 2 || asked[1] != 3 {
		t.Fatalf("asked %v, err %v; want [2 3], nil", asked, err)
	}
}

// With no leader known, each holder is asked in turn (it names the
// leader); this node never asks itself.
func TestDoAsksHoldersInTurn(t *testing.T) {
	var asked []uint64
	err := router(1, &view{}).Do(timeout(t, 5*time.Second), Call{
		Group: 7, Holders: []uint64{1, 2, 3},
		Remote: func(_ context.Context, node uint64) error {
			asked = append(asked, node)
			if len(asked) < 3 {
				return ErrUnreachable
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range asked {
		if n == 1 {
			t.Fatalf("asked itself: %v", asked)
		}
	}
}

// An attempt whose outcome is unknown ends a call that is not idempotent
// at once; an idempotent one is tried again, and when time runs out its
// error says the outcome is unknown, not that there is no leader.
func TestDoOutcomeUnknown(t *testing.T) {
	attempts := 0
	unknown := func(context.Context, uint64) error {
		attempts++
		return engine.ErrOutcomeUnknown
	}
	err := router(1, &view{leader: 2}).Do(timeout(t, 5*time.Second), Call{Group: 7, Remote: unknown})
	if !errors.Is(err, engine.ErrOutcomeUnknown) || attempts != 1 {
		t.Fatalf("not idempotent: %d attempts, %v; want 1, ErrOutcomeUnknown", attempts, err)
	}
	attempts = 0
	err = router(1, &view{leader: 2}).Do(timeout(t, 100*time.Millisecond), Call{Group: 7, Remote: unknown, Idempotent: true})
	if !errors.Is(err, engine.ErrOutcomeUnknown) || errors.Is(err, engine.ErrNoLeader) || attempts < 2 {
		t.Fatalf("idempotent: %d attempts, %v; want several, ErrOutcomeUnknown", attempts, err)
	}
}

// With no leader anywhere the call fails with ErrNoLeader once ctx ends;
// an error that is not about leadership ends it at once, as it is.
func TestDoNoLeaderAndOtherErrors(t *testing.T) {
	err := router(1, &view{}).Do(timeout(t, 50*time.Millisecond), Call{Group: 7})
	if !errors.Is(err, engine.ErrNoLeader) {
		t.Fatalf("no holders: %v, want ErrNoLeader", err)
	}
	refused := errors.New("refused: topic in use")
	attempts := 0
	err = router(1, &view{leads: true}).Do(timeout(t, 5*time.Second), Call{Group: 7, Local: func(context.Context) error { attempts++; return refused }})
	if !errors.Is(err, refused) || attempts != 1 {
		t.Fatalf("%d attempts, %v; want 1, the refusal", attempts, err)
	}
	// A new leader not ready yet is asked again.
	attempts = 0
	err = router(1, &view{leads: true}).Do(timeout(t, 5*time.Second), Call{Group: 7, Local: func(context.Context) error {
		attempts++
		if attempts < 3 {
			return ErrNotReady
		}
		return nil
	}})
	if err != nil || attempts != 3 {
		t.Fatalf("%d attempts, %v; want 3, nil", attempts, err)
	}
}

// NeverSent tells a call that never left (nothing listens at the address)
// from one that reached the server and failed there.
func TestNeverSent(t *testing.T) {
	addr, err := testport.Free("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	ctx := timeout(t, 5*time.Second)

	opt, sent := NeverSent()
	_, err = healthpb.NewHealthClient(dial()).Check(ctx, &healthpb.HealthCheckRequest{}, opt)
	if err == nil || sent() {
		t.Fatalf("nothing listens: err %v, sent %v; want an error, not sent", err, sent())
	}
	if got := Unsent(2, sent, err); !errors.Is(got, ErrUnreachable) {
		t.Fatalf("Unsent: %v, want ErrUnreachable", got)
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	failing := grpc.UnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unavailable, "transport is closing") // reached the server
	})
	srv := grpc.NewServer(failing)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	opt, sent = NeverSent()
	_, err = healthpb.NewHealthClient(dial()).Check(ctx, &healthpb.HealthCheckRequest{}, opt)
	if err == nil || !sent() {
		t.Fatalf("the server answered an error: err %v, sent %v; want an error, sent", err, sent())
	}
	if got := Unsent(2, sent, err); !errors.Is(got, engine.ErrOutcomeUnknown) {
		t.Fatalf("Unsent: %v, want ErrOutcomeUnknown", got)
	}
}

// The cluster check refuses a request for another cluster without naming
// this node's, lets one that names none through only where allowed, and
// passes requests without a cluster id (the join).
func TestClusterCheck(t *testing.T) {
	check := ClusterCheck(func() string { return "abc123" }, "/anon")
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	for _, c := range []struct {
		method, id string
		req        any
		ok         bool
	}{
		{"/x", "abc123", idReq("abc123"), true},
		{"/x", "other", idReq("other"), false},
		{"/x", "", idReq(""), false},
		{"/anon", "", idReq(""), true},
		{"/anon", "other", idReq("other"), false},
		{"/x", "", &healthpb.HealthCheckRequest{}, true},
	} {
		_, err := check(context.Background(), c.req, &grpc.UnaryServerInfo{FullMethod: c.method}, handler)
		if (err == nil) != c.ok {
			t.Errorf("%s with cluster %q: %v, want ok %v", c.method, c.id, err, c.ok)
		}
		if err != nil && (status.Code(err) != codes.FailedPrecondition || strings.Contains(err.Error(), "abc123")) {
			t.Errorf("%s with cluster %q: %v: want FAILED_PRECONDITION not naming this node's cluster", c.method, c.id, err)
		}
	}
}

type idReq string

func (r idReq) GetClusterId() string { return string(r) }

// An idempotent call at a leader that stands still is given up once this
// node's replica knows another leader, and made again there; a
// non-idempotent one keeps waiting for its answer (a second copy could be
// stored), until its context ends.
func TestDoLeavesAStillLeaderForTheNewOne(t *testing.T) {
	var mu sync.Mutex
	v := &view{leader: 2}
	r := &Router{Self: 1, Tick: time.Millisecond, Status: func(uint64) (bool, uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		return v.leads, v.leader, true
	}}
	still := make(chan struct{}) // node 2 holds every call until ctx ends
	remote := func(ctx context.Context, node uint64) error {
		if node == 2 {
			close(still)
			<-ctx.Done()
			return fmt.Errorf("%w: node 2: %v", engine.ErrOutcomeUnknown, ctx.Err())
		}
		return nil
	}
	go func() {
		<-still
		mu.Lock()
		v.leader = 3 // the others elected node 3
		mu.Unlock()
	}()
	var asked []uint64
	err := r.Do(timeout(t, 10*time.Second), Call{Group: 7, Holders: []uint64{1, 2, 3}, Idempotent: true,
		Remote: func(ctx context.Context, node uint64) error { asked = append(asked, node); return remote(ctx, node) }})
	if err != nil || !slices.Equal(asked, []uint64{2, 3}) {
		t.Fatalf("idempotent: asked %v, err %v; want [2 3], nil", asked, err)
	}

	mu.Lock()
	v.leader = 2
	mu.Unlock()
	still = make(chan struct{})
	go func() {
		<-still
		mu.Lock()
		v.leader = 3
		mu.Unlock()
	}()
	asked = nil
	err = r.Do(timeout(t, 300*time.Millisecond), Call{Group: 7, Holders: []uint64{1, 2, 3},
		Remote: func(ctx context.Context, node uint64) error { asked = append(asked, node); return remote(ctx, node) }})
	if !errors.Is(err, engine.ErrOutcomeUnknown) || !slices.Equal(asked, []uint64{2}) {
		t.Fatalf("not idempotent: asked %v, err %v; want [2] and an unknown outcome once ctx ended", asked, err)
	}
}
