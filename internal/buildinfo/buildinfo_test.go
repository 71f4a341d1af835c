package buildinfo

import (
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// The version is the repository's VERSION file, a semantic version.
func TestVersionIsTheVERSIONFile(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(b)); Version != want {
		t.Fatalf("Version %q, VERSION holds %q", Version, want)
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(Version) {
		t.Fatalf("VERSION %q is not a semantic version", Version)
	}
}

// Without a commit set at link time, the toolchain's stamp is used.
func TestCommitFromVCSStamp(t *testing.T) {
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}, "abc-dirty"},
	} {
		if got := vcsCommit(c.settings); got != c.want {
			t.Errorf("vcsCommit(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}
