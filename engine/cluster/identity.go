package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spoolmq/spool/engine/log"
)

// identity is who this node is in its cluster, kept in
// DataDir/cluster/identity.json once the node has bootstrapped a cluster or
// been admitted to one. It never changes afterwards: a node id is never
// reused, and a data dir belongs to one cluster for good.
type identity struct {
	Version   int    `json:"version"`
	ClusterID string `json:"cluster_id"`
	NodeID    uint64 `json:"node_id"`
	// Token is the id of the request that admitted the node (AddNode's
	// token), so a node that crashed before seeing its admission applied
	// asks again with the same token and gets the same id.
	Token string `json:"token"`
}

const (
	// IdentityVersion is the format of identity.json; internal/buildinfo
	// reports it.
	IdentityVersion  = 1
	identityFile     = "identity.json"
	maxIdentityBytes = 4096
)

// loadIdentity returns the saved identity, or ok=false when there is none.
func loadIdentity(fsys log.FS, dir string) (id identity, ok bool, err error) {
	path := filepath.Join(dir, identityFile)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("engine: read %s: %w", path, err)
	}
	defer f.Close()
	buf := make([]byte, maxIdentityBytes+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return identity{}, false, fmt.Errorf("engine: read %s: %w", path, err)
	}
	if n > maxIdentityBytes {
		return identity{}, false, fmt.Errorf("engine: %s is larger than %d bytes: it is not a Spool node identity; restore it or remove the data dir to start a new node", path, maxIdentityBytes)
	}
	if err := json.Unmarshal(buf[:n], &id); err != nil {
		return identity{}, false, fmt.Errorf("engine: %s is damaged (%v): restore it from a backup, or remove the data dir and join the node as a new one", path, err)
	}
	if id.Version != IdentityVersion || id.ClusterID == "" || id.NodeID == 0 || id.Token == "" {
		return identity{}, false, fmt.Errorf("engine: %s holds version %d, cluster %q, node %d, a token of %d bytes: this spoold reads version %d with all fields set; restore the file or remove the data dir and join as a new node", path, id.Version, id.ClusterID, id.NodeID, len(id.Token), IdentityVersion)
	}
	return id, true, nil
}

// saveIdentity makes id durable (an atomic replace).
func saveIdentity(fsys log.FS, dir string, id identity) error {
	if err := log.MkdirAllSynced(fsys, dir); err != nil {
		return fmt.Errorf("engine: create %s: %w", dir, err)
	}
	id.Version = IdentityVersion
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	if err := log.WriteFileAtomic(fsys, filepath.Join(dir, identityFile), append(b, '\n')); err != nil {
		return fmt.Errorf("engine: save the node identity in %s: %w", dir, err)
	}
	return nil
}

// randomID returns n random bytes in hex: cluster ids and join tokens.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
