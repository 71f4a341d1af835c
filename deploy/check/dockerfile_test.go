package check

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// pinned is an image reference with a digest.
var pinned = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)

// numericUser is a USER of a uid, or uid:gid.
var numericUser = regexp.MustCompile(`^[0-9]+(:[0-9]+)?$`)

// The Dockerfile builds static binaries and every image it ships runs them
// as a non-root user (hadolint is not packaged in Debian; these are the
// rules that matter for the sidecar).
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	type stage struct {
		name, base, user string
		builds           []string
	}
	var stages []*stage
	args := map[string]string{} // ARGs before the first FROM: what FROM may use
	// Join continued lines, drop comments.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "ARG":
			if len(stages) == 0 {
				name, def, _ := strings.Cut(strings.TrimSpace(rest), "=")
				args[name] = def
			}
		case "FROM":
			f := strings.Fields(rest)
			s := &stage{base: os.Expand(f[0], func(k string) string { return args[k] })}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		case "USER":
			stages[len(stages)-1].user = strings.TrimSpace(rest)
		case "RUN":
			for _, cmd := range regexp.MustCompile(`&&|;`).Split(rest, -1) {
				if strings.Contains(cmd, "go build") {
					stages[len(stages)-1].builds = append(stages[len(stages)-1].builds, strings.TrimSpace(cmd))
				}
			}
		}
	}
	if len(stages) < 2 {
		t.Fatalf("want a build stage and image stages, found %d stages", len(stages))
	}
	images := 0
	named := map[string]bool{}
	for _, s := range stages {
		// Every base from a registry is pinned by digest: a tag can be
		// moved to another image (by its owner or by whoever takes over
		// the registry account) and the next build would ship it.
		if !named[s.base] && !pinned.MatchString(s.base) {
			t.Errorf("stage %s is based on %q, not pinned by digest: write image:tag@sha256:<64 hex> (crane digest image:tag)", s.name, s.base)
		}
		named[s.name] = true
		for _, cmd := range s.builds {
			if !strings.Contains(cmd, "CGO_ENABLED=0") {
				t.Errorf("stage %s: %q is not a static build: set CGO_ENABLED=0 (the images have no libc)", s.name, cmd)
			}
		}
		if len(s.builds) > 0 {
			continue
		}
		images++
		if !strings.HasPrefix(s.base, "gcr.io/distroless/static") {
			t.Errorf("image %s is based on %s: use gcr.io/distroless/static (no shell, no libc)", s.name, s.base)
		}
		// A numeric user: the kubelet refuses to start a container with
		// runAsNonRoot whose image's USER is a name ("image has
		// non-numeric user ... cannot verify user is non-root") unless the
		// pod names a numeric runAsUser.
		if !numericUser.MatchString(s.user) || s.user == "0" || strings.HasPrefix(s.user, "0:") {
			t.Errorf("image %s runs as %q: set USER 65532:65532 (distroless's nonroot, as numbers: the kubelet cannot check a name against runAsNonRoot)", s.name, s.user)
		}
	}
	if last := stages[len(stages)-1]; last.name != "spoold" {
		t.Errorf("the default target (the last stage) is %q: keep spoold last, so a plain docker build makes spoold", last.name)
	}
	if images < 2 {
		t.Errorf("want the spoold and spool-injector images, found %d", images)
	}
}
