package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/release"
	"github.com/spoolmq/spool/internal/testrelease"
	spool "github.com/spoolmq/spool/sdk/go"
)

// Every released data format stays readable (docs/upgrading.md, "Data
// dirs"): each data dir a release's spoold wrote (testdata/datadirs/
// <version>/<mode>.tar.gz, written by `go run ./internal/testrelease/datadirs`
// when the release is recorded) is opened by this build's spoold, which
// must find every record where the release left it (the log format, and in
// a cluster the raft state, a raft snapshot and the controller's state),
// the group's dead letters, and the group's committed offsets: the group's
// next deliveries are exactly the messages published after its last
// commit. Then it takes and delivers a new message.
func TestDataDirsOfEveryRelease(t *testing.T) {
	rels, err := testrelease.Read("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) == 0 {
		t.Fatal("RELEASES names no release")
	}
	for _, rel := range rels {
		for _, mode := range testrelease.Modes {
			t.Run(rel.Version+"/"+mode, func(t *testing.T) { testDataDir(t, rel.Version, mode) })
		}
	}
}

func testDataDir(t *testing.T, version, mode string) {
	dir := filepath.Join("testdata", "datadirs", version)
	b, err := os.ReadFile(filepath.Join(dir, mode+".json"))
	if err != nil {
		t.Fatalf("release %s has no %s fixture (go run ./internal/testrelease/datadirs -release %s): %v", version, mode, version, err)
	}
	var exp testrelease.Expect
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	n := &node{t: t, dataDir: filepath.Join(tmp, "data"), cfgPath: filepath.Join(tmp, "spool.yaml"), logPath: filepath.Join(tmp, "spoold.log")}
	if err := unpack(filepath.Join(dir, mode+".tar.gz"), n.dataDir); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 3)
	n.app, n.admin, n.peer = addrs[0], addrs[1], addrs[2]
	if err := os.WriteFile(n.cfgPath, []byte(testrelease.Config(mode, n.dataDir, n.app, n.admin, n.peer)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("spoold log:\n%s", tail(string(b), 60))
		}
	})
	n.start()
	ctx := context.Background()
	if err := testrelease.AwaitReady(ctx, n.admin, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	if v, err := release.Stamped(n.dataDir); v != buildinfo.Version || err != nil {
		t.Fatalf("%s: the data dir's release stamp says %q (%v) after this build opened it, want %s", mode, v, err, buildinfo.Version)
	}
	records, err := testrelease.ReadTopic(ctx, n.admin, testrelease.FixtureTopic)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(records, exp.Records) {
		t.Fatalf("%s: topic %s holds %v, release %s left %v", mode, testrelease.FixtureTopic, records, version, exp.Records)
	}
	trimmed, err := testrelease.ReadTopic(ctx, n.admin, testrelease.FixtureTrimmed)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(trimmed[0], exp.Trimmed) {
		t.Fatalf("%s: topic %s holds %v, release %s left %v", mode, testrelease.FixtureTrimmed, trimmed[0], version, exp.Trimmed)
	}
	dead, err := testrelease.DeadLetters(ctx, n.admin)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dead, exp.Dead) {
		t.Fatalf("%s: dead letters %v, release %s left %v", mode, dead, version, exp.Dead)
	}

	// The group resumes at its committed offsets: the pending messages and a
	// new one, nothing the release's spoold had delivered.
	c := n.client(ctx)
	if _, err := c.Publish(ctx, testrelease.FixtureTopic, []byte("k0"), []byte("after the upgrade"), spool.WithID("new-00")); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(exp.Pending), "new-00")
	var mu sync.Mutex
	var got []string
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(sctx, testrelease.FixtureGroup, []string{testrelease.FixtureTopic}, func(_ context.Context, m *spool.Message) error {
			mu.Lock()
			got = append(got, m.ID)
			mu.Unlock()
			return nil
		})
	}()
	eventually(t, 30*time.Second, "the pending messages and the new one delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range got {
			if !slices.Contains(want, id) {
				t.Fatalf("%s: delivered %s, which the release's spoold had delivered and committed (the group's offsets were lost)", mode, id)
			}
		}
		return len(got) >= len(want)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: delivered %v, want %v once each", mode, got, want)
	}
}

// unpack extracts the gzipped tar at path into dir.
func unpack(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%s: %q is outside the data dir", path, hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: %q is not a file or directory", path, hdr.Name)
		}
	}
}
