package spool_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/release"
)

// `make release` is not run by `make test` (it cross-builds six binaries
// and the SDK packages); its plan is checked here: `make -n release` lists
// every artifact, and the link flags it passes make a spoold that reports
// the VERSION file and the commit.
func TestReleaseDryRun(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	version := readVersion(t)
	out, err := exec.Command("make", "-n", "--no-print-directory", "release", "RELEASE_TRY=1").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, out)
	}
	plan := string(out)
	dist := "dist/" + version + "/"
	var ldflags string
	for _, arch := range []string{"amd64", "arm64"} {
		for _, cmd := range []string{"spoold", "spool", "spool-injector"} {
			bin := fmt.Sprintf("%s%s-%s-linux-%s", dist, cmd, version, arch)
			line := regexp.MustCompile(`(?m)^CGO_ENABLED=0 GOOS=linux GOARCH=` + arch + ` .* build -trimpath -ldflags '([^']*)' -o ` + regexp.QuoteMeta(bin) + ` ./cmd/` + cmd + `$`).FindStringSubmatch(plan)
			if line == nil {
				t.Fatalf("make -n release builds no static %s for linux/%s into %s:\n%s", cmd, arch, bin, plan)
			}
			ldflags = line[1]
			if !strings.Contains(plan, "-output "+bin+".cdx.json "+bin) {
				t.Errorf("no SBOM of %s", bin)
			}
		}
	}
	for _, want := range []string{
		"-m build --outdir " + strings.TrimSuffix(dist, "/") + " sdk/python",
		"npm pack --pack-destination ",
		"-f sdk/java/pom.xml -DskipTests package",
		"--target spoold -t ",
		"--target spool-injector -t ",
		"xargs sha256sum > SHA256SUMS",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("make -n release does not run %q", want)
		}
	}
	m := regexp.MustCompile(`-X github.com/spoolmq/spool/internal/buildinfo.commit=(\S+)`).FindStringSubmatch(ldflags)
	if m == nil {
		t.Fatalf("the release's link flags set no commit: %q", ldflags)
	}
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil && !strings.HasPrefix(m[1], strings.TrimSpace(string(head))) {
		t.Errorf("the release links commit %s, HEAD is %s", m[1], head)
	}

	// The same flags, for this machine: spoold reports what they say.
	spoold := filepath.Join(t.TempDir(), "spoold")
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", spoold, "./cmd/spoold").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(spoold, "version", "--json").Output()
	if err != nil {
		t.Fatalf("spoold version --json: %v", err)
	}
	var info struct{ Version, Commit string }
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("spoold version --json: %v: %s", err, out)
	}
	if info.Version != version || info.Commit != m[1] {
		t.Fatalf("spoold version: %s %s, want %s %s", info.Version, info.Commit, version, m[1])
	}
}

// RELEASES names each release once, oldest first, with its full commit,
// none newer than VERSION, and each has its CHANGELOG entry; CHANGELOG.md
// keeps an [Unreleased] section or the entry of VERSION itself.
func TestReleasesFile(t *testing.T) {
	version := readVersion(t)
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "\n## [Unreleased]\n") && !regexp.MustCompile(`(?m)^## \[`+regexp.QuoteMeta(version)+`\] - \d{4}-\d{2}-\d{2}$`).Match(changelog) {
		t.Errorf("CHANGELOG.md has neither ## [Unreleased] nor ## [%s] - <date>", version)
	}
	f, err := os.Open("RELEASES")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile(`^([0-9]+\.[0-9]+\.[0-9]+) ([0-9a-f]{40})$`)
	prev := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("RELEASES:%d: %q is not \"<version> <40-hex commit>\"", n, text)
		}
		v := m[1]
		if prev != "" && release.Compare(prev, v) >= 0 {
			t.Errorf("RELEASES:%d: %s after %s: oldest first, each once", n, v, prev)
		}
		if release.Compare(v, version) > 0 {
			t.Errorf("RELEASES:%d: %s is newer than VERSION %s", n, m[1], version)
		}
		if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(m[1]) + `\] - \d{4}-\d{2}-\d{2}$`).Match(changelog) {
			t.Errorf("RELEASES:%d: %s has no CHANGELOG.md entry \"## [%s] - <date>\"", n, m[1], m[1])
		}
		prev = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func readVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
