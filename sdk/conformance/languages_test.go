package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spoolmq/spool/internal/testrelease"
)

// bins holds what TestMain builds once.
var bins struct{ dir, spoold, goApp string }

// repo is the repository's root (this package is sdk/conformance).
var repo = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}()

// language is one SDK under test: how to run its conformance app.
type language struct {
	name string
	// releaseInHandler: the SDK has a handler outcome that releases the
	// delivery (all but Go, which releases only at the drain).
	releaseInHandler bool
	// errorTypes: the typed error each bad input surfaces as, by reason.
	errorTypes map[string]string
	// prepare checks the toolchain and the SDK's build in the tree at root
	// (this repository, or a release's: previous) once and returns the
	// command prefix that runs the app with its spec as last argument.
	prepare func(root string) ([]string, error)
	// previous: the language runs the previous release's SDK and app
	// (RELEASES), built in that release's tree.
	previous bool

	once   sync.Once
	prefix []string
	err    error
}

func (l *language) command(spec string) *exec.Cmd {
	args := append(append([]string(nil), l.prefix...), spec)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = repo
	return cmd
}

// ready prepares the language once; a missing toolchain or SDK build fails
// every subtest of the language, saying what to run.
func (l *language) ready(t *testing.T) {
	t.Helper()
	l.once.Do(func() {
		root := repo
		if l.previous {
			// Go's app is built from the release's tree by prepare; the
			// others run on the SDKs that tree's Makefile builds.
			if root, l.err = previousTree(l.name != "go-previous"); l.err != nil {
				return
			}
		}
		l.prefix, l.err = l.prepare(root)
	})
	if l.err != nil {
		t.Fatalf("%s conformance app cannot run: %v", l.name, l.err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func exists(path, what, fix string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s (%s) is missing: %s", what, path, fix)
	}
	return nil
}

const buildHint = "run `make test-sdk-conformance`, which builds every SDK first"

var languages = []*language{
	{
		name:             "go",
		releaseInHandler: true,
		errorTypes: map[string]string{
			"UNKNOWN_TOPIC":     "*status.Status",
			"MESSAGE_TOO_LARGE": "*status.Status",
		},
		prepare: func(root string) ([]string, error) {
			if root == repo {
				return []string{bins.goApp}, nil
			}
			rel, err := testrelease.Previous()
			if err != nil {
				return nil, err
			}
			app, err := testrelease.Build(rel, "./sdk/conformance/apps/go", "conformance-go", "")
			return []string{app}, err
		},
	},
	{
		name:             "python",
		releaseInHandler: true,
		errorTypes: map[string]string{
			"UNKNOWN_TOPIC":     "UnknownTopicError",
			"MESSAGE_TOO_LARGE": "MessageTooLargeError",
		},
		prepare: func(root string) ([]string, error) {
			py := filepath.Join(root, "sdk/python/.venv/bin/python")
			if root == repo {
				py = envOr("SPOOL_CONFORMANCE_PYTHON", py)
			}
			if err := exists(py, "the Python SDK's venv", buildHint); err != nil {
				return nil, err
			}
			if out, err := exec.Command(py, "-c", "import spool").CombinedOutput(); err != nil {
				return nil, fmt.Errorf("%s cannot import spool (%v: %s): %s", py, err, strings.TrimSpace(string(out)), buildHint)
			}
			return []string{py, filepath.Join(root, "sdk/conformance/apps/python/app.py")}, nil
		},
	},
	{
		name:             "typescript",
		releaseInHandler: true,
		errorTypes: map[string]string{
			"UNKNOWN_TOPIC":     "NotFoundError",
			"MESSAGE_TOO_LARGE": "InvalidRequestError",
		},
		prepare: func(root string) ([]string, error) {
			node, err := exec.LookPath("node")
			if err != nil {
				return nil, fmt.Errorf("node is not on PATH: the TypeScript SDK needs Node 20 or later")
			}
			if err := exists(filepath.Join(root, "sdk/typescript/dist/index.js"), "the TypeScript SDK's build", buildHint); err != nil {
				return nil, err
			}
			return []string{node, filepath.Join(root, "sdk/conformance/apps/typescript/app.js")}, nil
		},
	},
	{
		name:             "java",
		releaseInHandler: true,
		errorTypes: map[string]string{
			"UNKNOWN_TOPIC":     "NotFoundException",
			"MESSAGE_TOO_LARGE": "InvalidRequestException",
		},
		prepare: prepareJava,
	},
}

// prepareJava compiles the Java app against the SDK's classes and the
// runtime classpath that `make test-sdk-conformance` writes
// (sdk/java/target/classpath.txt, from mvn dependency:build-classpath).
func prepareJava(root string) ([]string, error) {
	javac, err := exec.LookPath("javac")
	if err != nil {
		return nil, fmt.Errorf("javac is not on PATH: the Java SDK needs a JDK 17 or later (make deps installs one)")
	}
	classes := filepath.Join(root, "sdk/java/target/classes")
	cpFile := filepath.Join(root, "sdk/java/target/classpath.txt")
	for path, what := range map[string]string{classes: "the Java SDK's classes", cpFile: "the Java SDK's runtime classpath"} {
		if err := exists(path, what, buildHint); err != nil {
			return nil, err
		}
	}
	deps, err := os.ReadFile(cpFile)
	if err != nil {
		return nil, err
	}
	cp := classes + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
	out := filepath.Join(bins.dir, "java")
	if root != repo {
		out += "-previous"
	}
	cmd := exec.Command(javac, "-d", out, "-cp", cp, filepath.Join(root, "sdk/conformance/apps/java/App.java"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling the Java app: %v:\n%s", err, b)
	}
	return []string{"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", out + string(os.PathListSeparator) + cp, "App"}, nil
}

// selected is the languages of SPOOL_CONFORMANCE_LANGS (a comma list, or
// "all"). Unset, the suite is skipped: it needs every SDK built, which
// `make test-sdk-conformance` does (and `go test ./...` does not).
func selected(t *testing.T) []*language {
	v := os.Getenv("SPOOL_CONFORMANCE_LANGS")
	switch v {
	case "":
		t.Skip("SPOOL_CONFORMANCE_LANGS is not set: run `make test-sdk-conformance` (every SDK), or set it to some of go,python,typescript,java (or all) with those SDKs built")
	case "all":
		return languages
	}
	var out []*language
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, l := range languages {
			if l.name == name {
				out = append(out, l)
				found = true
			}
			// <lang>-previous: the previous release's SDK (previousOf).
			if l.name+"-previous" == name {
				out = append(out, previousOf(l))
				found = true
			}
		}
		if !found {
			t.Fatalf("SPOOL_CONFORMANCE_LANGS: unknown language %q (go, python, typescript, java, each also as <lang>-previous)", name)
		}
	}
	return out
}

// previousOf is language l running the previous release's SDK and app.
func previousOf(l *language) *language {
	return &language{name: l.name + "-previous", releaseInHandler: l.releaseInHandler, errorTypes: l.errorTypes, prepare: l.prepare, previous: true}
}

var prevTree struct {
	once sync.Once
	dir  string
	err  error
}

// previousTree is the previous release's source tree, with (sdks) its
// SDKs built by that tree's own Makefile (its build-sdk-* targets), once.
func previousTree(sdks bool) (string, error) {
	if !sdks {
		rel, err := testrelease.Previous()
		if err != nil {
			return "", err
		}
		return testrelease.Tree(rel)
	}
	prevTree.once.Do(func() {
		rel, err := testrelease.Previous()
		if err != nil {
			prevTree.err = err
			return
		}
		if prevTree.dir, err = testrelease.Tree(rel); err != nil {
			prevTree.err = err
			return
		}
		cmd := exec.Command("make", "--no-print-directory", "build-sdk-python", "build-sdk-typescript", "build-sdk-java")
		cmd.Dir = prevTree.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			prevTree.err = fmt.Errorf("building release %s's SDKs in %s: %v\n%s", rel.Version, prevTree.dir, err, out)
		}
	})
	return prevTree.dir, prevTree.err
}
