// Package rapidreplay checks that the fail files a package keeps under
// testdata/rapid still replay.
//
// Every fail file kept under testdata/rapid (a failure rapid found, kept as
// a regression case: rapid replays each one at the start of its test) must
// still replay: its test, run on that file alone, makes the draws the file
// recorded, with the same values. A generator changed since no longer reads
// the file the same way (rapid then says "no longer valid", or worse,
// replays another case without a word), and the file is dead weight that
// looks like coverage: remove it, or regenerate it (a new failure with the
// same fault, written by rapid). A failure in the middle of a case leaves a
// file whose recorded bits end where it failed: once the fault is fixed, the
// case needs more draws than it holds and rapid calls it no longer valid.
// Follow its bits with zero words (the smallest draws: the case runs on with
// the first action and the smallest values) and say so in a comment at its
// top; Check then checks that the case is replayed and passes.
//
// To replay one seed or file by hand:
//
//	go test ./PKG -run 'TestX$' -rapid.seed=N -rapid.v
//	go test ./PKG -run 'TestX$' -rapid.failfile=testdata/rapid/TestX/F.fail -rapid.v
package rapidreplay

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Check replays every testdata/rapid/*/*.fail of the package whose test
// binary calls it, each alone in a fresh directory, and fails if one no
// longer replays or its test fails on it.
func Check(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob("testdata/rapid/*/*.fail")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		test := filepath.Base(filepath.Dir(f))
		t.Run(test+"/"+filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := rapidDraws(b)
			if len(want) == 0 {
				t.Fatalf("%s records no draw", f)
			}
			// The test binary again, in a directory that holds this fail
			// file alone (rapid replays every file it finds there).
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1",
				"-rapid.checks=0", "-rapid.nofailfile", "-rapid.v")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if bytes.Contains(out, []byte("no longer valid")) || bytes.Contains(out, []byte("ignoring fail file")) {
				t.Fatalf("%s does not replay (%v):\n%s", f, err, lastLines(out, 5))
			}
			got := rapidDraws(out)
			for i, w := range want {
				if i >= len(got) || got[i] != w {
					g := "nothing"
					if i < len(got) {
						g = got[i]
					}
					t.Fatalf("%s replays another case: draw %d is %q, the file recorded %q (%v):\n%s", f, i, g, w, err, lastLines(out, 5))
				}
			}
			if err != nil {
				t.Fatalf("%s: its test fails on it again: %v\n%s", f, err, lastLines(out, 20))
			}
		})
	}
}

// rapidDraws returns the "draw label: value" lines rapid logged in b (a
// fail file's header, or the -rapid.v output of a run).
func rapidDraws(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if _, d, ok := strings.Cut(sc.Text(), "[rapid] draw "); ok {
			out = append(out, d)
		}
	}
	return out
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
