//go:build unix

package log

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFilesOwnerOnly: whatever the umask (000 included), the directories
// the log creates are 0700 and its files 0600: segments hold every
// message, and no other user of the host may read them.
func TestFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	root := filepath.Join(t.TempDir(), "data", "log")
	s, err := OpenStore(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	p, err := s.Partition("orders-0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Append(ctx, []Record{{ID: []byte("a"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	stop()
	<-ran
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(filepath.Dir(root), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = fs.FileMode(0o700)
		} else {
			files++
		}
		if path != filepath.Dir(root) && info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk: %v, %d files", err, files)
	}
}
