package testredis

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Start: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("ping answered after Kill")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
}

func TestFreezeThaw(t *testing.T) {
	s := Start(t)
	s.Freeze()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("a frozen server answered PING")
	}
	s.Thaw()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Thaw: %v", err)
	}
}

func TestTwoServersGetTwoPorts(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("both servers on %s", a.Addr())
	}
}
