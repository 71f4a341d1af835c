package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// On the OS: the file is created, then replaced whole, and no temporary
// file is left beside it.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "catalogue.json")
	for _, want := range []string{"first version, longer than the second\n", "second\n"} {
		if err := WriteFile(path, []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("file holds %q, want %q", got, want)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != "catalogue.json" {
			t.Fatalf("directory holds %v, want only catalogue.json", ents)
		}
	}
}

// A directory that does not exist: the error is the OS's, and nothing is
// written.
func TestWriteFileMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "file")
	if err := WriteFile(path, []byte("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WriteFile = %v, want fs.ErrNotExist", err)
	}
}

// recFS records the calls Write makes and fails the one named fail.
type recFS struct {
	calls []string
	fail  string
	files map[string]string // name → data after a successful rename
	data  []byte
}

var errInjected = errors.New("injected")

func (r *recFS) step(name string) error {
	r.calls = append(r.calls, name)
	if name == r.fail {
		return errInjected
	}
	return nil
}

func (r *recFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if err := r.step("open " + filepath.Base(name)); err != nil {
		return nil, err
	}
	if flag&os.O_CREATE == 0 || flag&os.O_TRUNC == 0 {
		return nil, errors.New("want O_CREATE|O_TRUNC")
	}
	return recFile{r}, nil
}

func (r *recFS) Rename(oldname, newname string) error {
	if err := r.step("rename " + filepath.Base(oldname) + " " + filepath.Base(newname)); err != nil {
		return err
	}
	r.files[newname] = string(r.data)
	return nil
}

func (r *recFS) Remove(name string) error { return r.step("remove " + filepath.Base(name)) }

func (r *recFS) SyncDir(name string) error { return r.step("syncdir " + name) }

type recFile struct{ r *recFS }

func (f recFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.r.step("write"); err != nil {
		return 0, err
	}
	f.r.data = append(f.r.data[:0], b...)
	return len(b), nil
}

func (f recFile) Sync() error  { return f.r.step("sync") }
func (f recFile) Close() error { return f.r.step("close") }

// The order of the steps, and what a failure at each leaves: before the
// rename, the temporary file is removed and the old file untouched; the
// directory's sync failing is reported after the rename.
func TestWriteSteps(t *testing.T) {
	ok := []string{"open f.tmp", "write", "sync", "close", "rename f.tmp f", "syncdir /d"}
	for _, fail := range append([]string{""}, ok...) {
		r := &recFS{fail: fail, files: map[string]string{"/d/f": "old"}}
		err := Write(r, "/d/f", []byte("new"))
		if fail == "" {
			if err != nil || !slices.Equal(r.calls, ok) || r.files["/d/f"] != "new" {
				t.Fatalf("no fault: err %v, calls %q, file %q", err, r.calls, r.files["/d/f"])
			}
			continue
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("fault at %q: err %v, want the injected one", fail, err)
		}
		i := slices.Index(ok, fail)
		var want []string
		switch fail {
		case "open f.tmp":
			want = ok[:1]
		case "write", "sync":
			want = append(slices.Clone(ok[:i+1]), "close", "remove f.tmp") // closed even so
		case "close", "rename f.tmp f":
			want = append(slices.Clone(ok[:i+1]), "remove f.tmp")
		case "syncdir /d":
			want = ok
		}
		if !slices.Equal(r.calls, want) {
			t.Errorf("fault at %q: calls %q, want %q", fail, r.calls, want)
		}
		wantFile := "old"
		if fail == "syncdir /d" {
			wantFile = "new"
		}
		if r.files["/d/f"] != wantFile {
			t.Errorf("fault at %q: file holds %q, want %q", fail, r.files["/d/f"], wantFile)
		}
	}
}
