// Package testrelease builds the spoold of a past release for the tests
// that run it beside this tree's (the rolling-upgrade runs, the data-dir
// fixtures): a release is a commit on main named in the repository's
// RELEASES file (docs/operations.md, "Releases"). The commit's tree is taken
// from the repository's own history (git archive), so the tests need a
// clone with history, not a network.
package testrelease

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// Release is a line of RELEASES.
type Release struct {
	Version string // semantic version, "0.1.0"
	Commit  string // 40 hex digits
}

var line = regexp.MustCompile(`^([0-9]+\.[0-9]+\.[0-9]+) ([0-9a-f]{40})$`)

// Read returns the releases in root's RELEASES, oldest first.
func Read(root string) ([]Release, error) {
	f, err := os.Open(filepath.Join(root, "RELEASES"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Release
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			return nil, fmt.Errorf("RELEASES line %d: %q is not \"<version> <40-hex commit>\"", n, text)
		}
		out = append(out, Release{Version: m[1], Commit: m[2]})
	}
	return out, sc.Err()
}

// Root is the repository's top directory, found from the working directory
// upwards (the directory holding RELEASES and go.mod).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "RELEASES")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no RELEASES file in the working directory or above it")
		}
		dir = up
	}
}

// Previous is the last release in RELEASES.
func Previous() (Release, error) {
	root, err := Root()
	if err != nil {
		return Release{}, err
	}
	rs, err := Read(root)
	if err != nil {
		return Release{}, err
	}
	if len(rs) == 0 {
		return Release{}, errors.New("RELEASES names no release")
	}
	return rs[len(rs)-1], nil
}

// Spoold builds release rel's cmd/spoold with the build tags given (the
// fault suite runs test builds: "spoolfaults") and returns its path.
func Spoold(rel Release, tags string) (string, error) {
	return Build(rel, "./cmd/spoold", "spoold", tags)
}

// Build builds package pkg (a path in the root module, "./cmd/spoold") of
// release rel's tree with the build tags given into a binary called name,
// and returns its path. The binary is kept under the user's cache
// directory by commit, name and tags, so only the first call on a machine
// builds (up to a minute on two cores).
func Build(rel Release, pkg, name, tags string) (string, error) {
	key := name
	if tags != "" {
		key += "-" + strings.ReplaceAll(tags, ",", "-")
	}
	dir, unlock, err := cacheDir(rel, key)
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	src, err := Tree(rel)
	if err != nil {
		return "", err
	}
	tmp := bin + ".part"
	build := exec.Command("go", "build", "-buildvcs=false", "-tags", tags,
		"-ldflags", "-X github.com/spoolmq/spool/internal/buildinfo.commit="+rel.Commit,
		"-o", tmp, pkg)
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("release %s: go build %s: %v\n%s", rel.Version, pkg, err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// Tree returns a directory holding release rel's source tree, taken from
// this clone's history (git archive of its commit) once and kept under the
// user's cache directory. Callers may build in it; they must not change
// its tracked files.
func Tree(rel Release) (string, error) {
	dir, unlock, err := cacheDir(rel, "tree")
	if err != nil {
		return "", err
	}
	defer unlock()
	tree := filepath.Join(dir, "src")
	if _, err := os.Stat(filepath.Join(tree, "RELEASES")); err == nil {
		return tree, nil
	}
	tmp := tree + ".part"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rel.Commit)
	untar := exec.Command("tar", "-x", "-C", tmp)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var aerr, terr strings.Builder
	archive.Stderr, untar.Stderr = &aerr, &terr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", fmt.Errorf("release %s: git archive %s (a clone without that commit? the upgrade tests need the repository's history): %v: %s", rel.Version, rel.Commit, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("release %s: untar: %v: %s", rel.Version, err, terr.String())
	}
	return tree, os.Rename(tmp, tree)
}

// cacheDir returns release rel's cache directory, locked for what key
// names (one build of a thing at a time: test binaries of several packages
// run at once; the others wait and take its result).
func cacheDir(rel Release, key string) (dir string, unlock func(), err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir = filepath.Join(cache, "spool-releases", rel.Commit)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, key+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return "", nil, err
	}
	return dir, func() { lock.Close() }, nil
}
