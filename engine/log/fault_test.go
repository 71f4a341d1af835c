package log

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestDiskFull(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		fsys := NewMemFS()
		o.FS = fsys
		h := openHarness(t, "/data", o)
		p := h.part("p")
		want := appendSome(t, p, 0, 10, 100)
		fsys.SetCapacity(fsys.Used() + 700) // room for a few batches only
		ctx := testCtx(t)
		var err error
		for b := 10; b < 100; b++ {
			recs := genRecords(b, 2, 100)
			var base int64
			base, err = p.Append(ctx, recs)
			if err != nil {
				break
			}
			if base != int64(len(want)) {
				t.Fatalf("base %d, want %d", base, len(want))
			}
			want = append(want, recs...)
		}
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk full") ||
			!strings.Contains(err.Error(), "resume when space returns") {
			t.Fatalf("append on a full disk: %v", err)
		}
		// Durable data is untouched and the torn tail is gone.
		checkContents(t, p, want)
		fsys.SetCapacity(0)
		want = append(want, appendSome(t, p, 200, 5, 100)...)
		checkContents(t, p, want)
		h.stop()
		if o.Fsync == FsyncAlways {
			fsys.Crash()
			h.s = nil
			h.start()
			checkContents(t, h.part("p"), want)
		}
	})
}

func TestSyncFailure(t *testing.T) {
	fsys := NewMemFS()
	h := openHarness(t, "/data", Options{FS: fsys, Logger: quietLogger()})
	p := h.part("p")
	want := appendSome(t, p, 0, 5, 10)
	fsys.SetFault(func(op, name string) error {
		if op == "sync" && strings.HasSuffix(name, ".log") {
			return syscall.EIO
		}
		return nil
	})
	if _, err := p.Append(testCtx(t), genRecords(9, 3, 10)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append with failing fdatasync: %v", err)
	}
	if p.NextOffset() != int64(len(want)) || p.DurableOffset() != int64(len(want)) {
		t.Fatalf("unsynced tail kept: next %d durable %d", p.NextOffset(), p.DurableOffset())
	}
	fsys.SetFault(nil)
	want = append(want, appendSome(t, p, 10, 3, 10)...)
	checkContents(t, p, want)
}

func TestDataDirNotWritable(t *testing.T) {
	// Tests usually run as root, for whom chmod 0500 does not bite; then the
	// permission case is covered by MemFS fault injection below.
	if os.Geteuid() != 0 {
		dir := filepath.Join(t.TempDir(), "ro")
		os.Mkdir(dir, 0o500)
		_, err := OpenStore(dir, Options{})
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not writable") {
			t.Fatalf("read-only dir: %v", err)
		}
	}
	fsys := NewMemFS()
	fsys.MkdirAll("/ro", 0o755)
	fsys.SetFault(func(op, name string) error {
		if strings.HasPrefix(name, "/ro/") && (op == "open" || op == "lock" || op == "write") {
			return syscall.EACCES
		}
		return nil
	})
	_, err := OpenStore("/ro", Options{FS: fsys})
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "/ro") ||
		!strings.Contains(err.Error(), "not writable") {
		t.Fatalf("read-only dir: %v", err)
	}
}

func TestLockMemFS(t *testing.T) {
	fsys := NewMemFS()
	s, err := OpenStore("/d", Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore("/d", Options{FS: fsys}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	s.Close()
}
