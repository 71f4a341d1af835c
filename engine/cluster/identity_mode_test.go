//go:build unix

package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spoolmq/spool/engine/log"
)

// TestIdentityFileOwnerOnly: identity.json holds the join token; it is
// 0600 in a 0700 directory whatever the umask, and an error about a bad
// file does not quote the token.
func TestIdentityFileOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "cluster")
	if err := saveIdentity(log.OSFS{}, dir, identity{ClusterID: "c", NodeID: 1, Token: "secret-join-token"}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, identityFile): 0o600} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, identityFile), []byte(`{"version":99,"token":"secret-join-token"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadIdentity(log.OSFS{}, dir)
	if err == nil || strings.Contains(err.Error(), "secret-join-token") {
		t.Fatalf("loadIdentity of a bad file = %v, want an error without the token", err)
	}
}
