package release

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/spoolmq/spool/internal/atomicfile"
	"github.com/spoolmq/spool/internal/buildinfo"
)

// The data dir's stamp (docs/upgrading.md, "Data dirs"): the file RELEASE
// in a data dir names the last release that opened it, "spoold <version>
// <commit>\n". spoold writes it once its storage opened the data dir, so
// it names a release that reads every format the data dir holds. A release
// that cannot open the data dir names the release of the stamp in its
// refusal when that release is newer than itself (a newer release may
// have written formats it does not read). Releases before 0.2.0 write no
// stamp.

// StampFile is the stamp's name in the data dir.
const StampFile = "RELEASE"

// stampMax bounds what is read of a stamp (a stamp is about 60 bytes).
const stampMax = 256

var (
	stampLine = regexp.MustCompile(`^spoold ([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?) ([0-9A-Za-z.-]+)\n$`)
	semver    = regexp.MustCompile(`^([0-9]+)\.([0-9]+)\.([0-9]+)(?:-([0-9A-Za-z.-]+))?$`)
)

// Stamp records this build's release as the last to open dataDir.
func Stamp(dataDir string) error {
	line := fmt.Sprintf("spoold %s %s\n", buildinfo.Version, buildinfo.Commit())
	if err := atomicfile.WriteFile(filepath.Join(dataDir, StampFile), []byte(line)); err != nil {
		return fmt.Errorf("data dir %s: recording this release in %s: %w", dataDir, StampFile, err)
	}
	return nil
}

// Stamped returns the version dataDir's stamp names: "" when there is no
// stamp (a new data dir, or one only releases before 0.2.0 opened), and an
// error for a stamp that is not one.
func Stamped(dataDir string) (string, error) {
	f, err := os.Open(filepath.Join(dataDir, StampFile))
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, stampMax+1))
	if err != nil {
		return "", err
	}
	m := stampLine.FindSubmatch(b)
	if len(b) > stampMax || m == nil {
		return "", fmt.Errorf("data dir %s: %s is not a release stamp (\"spoold <version> <commit>\"): %.64q", dataDir, StampFile, b)
	}
	return string(m[1]), nil
}

// ExplainOpen returns err, a failure to open dataDir, with the release that
// last opened it named when that release is newer than this one.
func ExplainOpen(err error, dataDir string) error {
	if err == nil || dataDir == "" {
		return err
	}
	v, serr := Stamped(dataDir)
	if serr != nil || v == "" || Compare(v, buildinfo.Version) <= 0 {
		return err
	}
	return fmt.Errorf("%w (data dir %s was last opened by spoold %s, newer than this spoold %s: it may hold formats only %s and later read; run spoold %s or later on it, docs/upgrading.md)",
		err, dataDir, v, buildinfo.Version, v, v)
}

// Compare orders two semantic versions (major.minor.patch[-pre]): negative
// when a is older than b, 0 when equal, positive when newer; a pre-release
// is older than its release. A string that is not a version is older than
// any version.
func Compare(a, b string) int {
	ma, mb := semver.FindStringSubmatch(a), semver.FindStringSubmatch(b)
	switch {
	case ma == nil && mb == nil:
		return strings.Compare(a, b)
	case ma == nil:
		return -1
	case mb == nil:
		return 1
	}
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			return x - y
		}
	}
	switch pa, pb := ma[4], mb[4]; {
	case pa == pb:
		return 0
	case pa == "":
		return 1
	case pb == "":
		return -1
	default:
		return strings.Compare(pa, pb)
	}
}
