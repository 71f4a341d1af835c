// Command datadirs writes the data-dir fixtures of a release
// (docs/upgrading.md, "Data dirs"): for each mode in testrelease.Modes, the
// release's spoold (built from the commit RELEASES names) writes a data dir,
// which is packed as <out>/<version>/<mode>.tar.gz with <mode>.json, what
// it holds. Run it once per release, when the release is recorded:
//
//	go run ./internal/testrelease/datadirs [-release 0.1.0] [-out sidecar/e2e/testdata/datadirs]
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spoolmq/spool/internal/testport"
	"github.com/spoolmq/spool/internal/testrelease"
)

func main() {
	version := flag.String("release", "", "the release (default: the last in RELEASES)")
	out := flag.String("out", "sidecar/e2e/testdata/datadirs", "where <version>/<mode>.tar.gz go")
	flag.Parse()
	if err := run(*version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "datadirs:", err)
		os.Exit(1)
	}
}

func run(version, out string) error {
	root, err := testrelease.Root()
	if err != nil {
		return err
	}
	rels, err := testrelease.Read(root)
	if err != nil {
		return err
	}
	var rel *testrelease.Release
	for i := range rels {
		if version == "" || rels[i].Version == version {
			rel = &rels[i]
		}
	}
	if rel == nil {
		return fmt.Errorf("RELEASES has no release %q", version)
	}
	bin, err := testrelease.Spoold(*rel, "")
	if err != nil {
		return err
	}
	dest := filepath.Join(out, rel.Version)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	for _, mode := range testrelease.Modes {
		tmp, err := os.MkdirTemp("", "spool-fixture-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		addrs, err := testport.FreeN("127.0.0.1", 3)
		if err != nil {
			return err
		}
		logf, err := os.Create(filepath.Join(tmp, "spoold.log"))
		if err != nil {
			return err
		}
		data := filepath.Join(tmp, "data")
		exp, err := testrelease.WriteFixture(context.Background(), rel.Version, bin, mode, data, filepath.Join(tmp, "spool.yaml"), [3]string(addrs), logf)
		logf.Close()
		if err != nil {
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("%s: %w\nspoold's log:\n%s", mode, err, log)
		}
		if err := pack(data, filepath.Join(dest, mode+".tar.gz")); err != nil {
			return err
		}
		b, err := json.MarshalIndent(exp, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dest, mode+".json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %s\n", mode, filepath.Join(dest, mode+".tar.gz"))
	}
	return nil
}

// pack writes dir's files, with their modes, to a gzipped tar at path
// (names relative to dir; no times, owners or sparse files: the same data
// dir packs the same way).
func pack(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		default:
			return fmt.Errorf("%s: not a file or directory (%v)", p, info.Mode())
		}
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
