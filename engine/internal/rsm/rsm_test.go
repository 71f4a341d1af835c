package rsm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memLog is a committed log in memory; start > 0 is a compacted log.
type memLog struct {
	start   int64
	values  [][]byte // values[i] is at offset start+i
	readErr error
}

func (l *memLog) StartOffset() int64 { return l.start }

func (l *memLog) Read(from int64, maxBytes int, end int64, dst []log.Record) ([]log.Record, error) {
	if l.readErr != nil {
		return dst, l.readErr
	}
	if from < l.start {
		return dst, &log.OffsetOutOfRangeError{Offset: from, Start: l.start}
	}
	for off := from; off < end && off-l.start < int64(len(l.values)); off++ {
		dst = append(dst, log.Record{Offset: off, Value: l.values[off-l.start]})
		if len(dst) >= 3 { // small reads: batches end mid-log
			break
		}
	}
	return dst, nil
}

// sumMachine adds decimal numbers; "ckpt:N" restores the sum N (the
// checkpoint a compacted log starts with); "diverge" stops the applier.
type sumMachine struct {
	sum      int64
	restored int
}

func (m *sumMachine) Decode(b []byte) (string, error) {
	s := string(b)
	if s == "diverge" || len(s) > 5 && s[:5] == "ckpt:" {
		return s, nil
	}
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return "", fmt.Errorf("not a number: %q", s)
	}
	return s, nil
}

func (m *sumMachine) Apply(entries []Entry[string]) ([]int64, int, error) {
	var res []int64
	for i, e := range entries {
		if e.Cmd == "diverge" {
			res = append(res, m.sum)
			return res, i + 1, errors.New("the state diverged")
		}
		v, _ := strconv.ParseInt(e.Cmd, 10, 64)
		m.sum += v
		res = append(res, m.sum)
	}
	return res, len(entries), nil
}

func (m *sumMachine) Restore(lg Log, start, end int64) (int64, error) {
	recs, err := lg.Read(start, 1<<20, end, nil)
	if err != nil || len(recs) == 0 {
		return -1, err
	}
	s := string(recs[0].Value)
	if len(s) < 5 || s[:5] != "ckpt:" {
		return 0, fmt.Errorf("the log does not start with a checkpoint: %q", s)
	}
	m.sum, _ = strconv.ParseInt(s[5:], 10, 64)
	m.restored++
	return start + 1, nil
}

func values(vs ...string) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i] = []byte(v)
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// A record that does not decode is skipped on every replica alike: the
// records after it are applied, its waiter is told it was skipped, and it
// is counted. It never stops the applier.
func TestUndecodableRecordIsSkippedNotAHalt(t *testing.T) {
	lg := &memLog{values: values("1", "2", "\xff garbage", "3", "4", "not a number either", "5")}
	m := &sumMachine{}
	a := New(Config{Name: "test"}, lg, m)
	if err := a.CatchUp(int64(len(lg.values))); err != nil {
		t.Fatalf("CatchUp: %v", err)
	}
	if m.sum != 15 || a.Applied() != 7 || a.Skipped() != 2 || a.Err() != nil {
		t.Fatalf("sum %d applied %d skipped %d err %v; want 15, 7, 2, nil", m.sum, a.Applied(), a.Skipped(), a.Err())
	}
	if _, err := a.WaitApplied(ctx(t), 2); !errors.Is(err, ErrSkipped) {
		t.Fatalf("the skipped record's waiter got %v, want ErrSkipped", err)
	}
	if res, err := a.WaitApplied(ctx(t), 4); err != nil || res != 10 {
		t.Fatalf("offset 4: %d, %v; want 10", res, err)
	}
	// Another replica reading the same bytes reaches the same state.
	m2 := &sumMachine{}
	a2 := New(Config{Name: "test"}, lg, m2)
	_ = a2.CatchUp(int64(len(lg.values)))
	if m2.sum != m.sum || a2.Applied() != a.Applied() {
		t.Fatalf("a second replica reached %d at %d, the first %d at %d", m2.sum, a2.Applied(), m.sum, a.Applied())
	}
}

// A waiter is released as soon as its command is applied; one whose result
// is no longer kept learns that the outcome is unknown.
func TestWaitAppliedAndResultsKept(t *testing.T) {
	lg := &memLog{values: values("1", "1", "1", "1", "1", "1")}
	a := New(Config{Name: "test", MaxResults: 2}, lg, &sumMachine{})
	got := make(chan error, 1)
	go func() { _, err := a.WaitApplied(ctx(t), 5); got <- err }()
	if err := a.CatchUp(3); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("released before its command was applied: %v", err)
	default:
	}
	if err := a.CatchUp(6); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("WaitApplied(5): %v", err)
	}
	if _, err := a.WaitApplied(ctx(t), 0); !errors.Is(err, engine.ErrOutcomeUnknown) || !errors.Is(err, ErrResultUnknown) {
		t.Fatalf("a result evicted long ago: %v, want ErrResultUnknown", err)
	}
	if err := a.AwaitApplied(ctx(t), 6); err != nil {
		t.Fatal(err)
	}
}

// A log that starts past what was applied is restored from its checkpoint,
// then applied on from there.
func TestRestoreFromCheckpoint(t *testing.T) {
	lg := &memLog{start: 10, values: values("ckpt:100", "1", "2")}
	m := &sumMachine{}
	a := New(Config{Name: "test"}, lg, m)
	if err := a.CatchUp(13); err != nil {
		t.Fatal(err)
	}
	if m.sum != 103 || m.restored != 1 || a.Applied() != 13 {
		t.Fatalf("sum %d restored %d applied %d; want 103, 1, 13", m.sum, m.restored, a.Applied())
	}
	// Nothing committed past the checkpoint yet: -1 waits without error.
	lg2 := &memLog{start: 10}
	a2 := New(Config{Name: "test"}, lg2, &sumMachine{})
	if err := a2.CatchUp(11); err != nil || a2.Applied() != 0 {
		t.Fatalf("waiting for the checkpoint: applied %d, %v", a2.Applied(), err)
	}
}

// What makes the state untrustworthy stops the applier: a log that cannot
// be read, a state that diverged, a compacted log without a checkpoint.
// Waiters are released with the reason.
func TestStopsOnWhatMakesTheStateUntrustworthy(t *testing.T) {
	cases := map[string]*memLog{
		"unreadable":    {values: values("1", "2"), readErr: errors.New("EIO")},
		"diverged":      {values: values("1", "diverge", "2")},
		"no checkpoint": {start: 5, values: values("1")},
	}
	for name, lg := range cases {
		t.Run(name, func(t *testing.T) {
			a := New(Config{Name: "test"}, lg, &sumMachine{})
			waiter := make(chan error, 1)
			go func() { _, err := a.WaitApplied(ctx(t), lg.start+2); waiter <- err }()
			err := a.CatchUp(lg.start + int64(len(lg.values)))
			if err == nil || a.Err() == nil {
				t.Fatalf("CatchUp went on: %v", err)
			}
			if werr := <-waiter; !errors.Is(werr, engine.ErrOutcomeUnknown) {
				t.Fatalf("the waiter got %v, want ErrOutcomeUnknown", werr)
			}
			if err2 := a.CatchUp(10); err2 == nil {
				t.Fatal("a stopped applier applied again")
			}
		})
	}
}
