// Package release describes this binary as a release: internal/buildinfo's
// version, commit and Go version, and the peer protocol and data formats it
// speaks, each taken from the constant its package checks. `spoold version`
// and `spool version` print it; docs/operations.md, "Releases", says how a
// release is made.
//
// It imports the engine packages whose formats it names; the engine never
// imports it.
package release

import (
	"fmt"
	"strings"

	"github.com/spoolmq/spool/engine/cluster"
	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/engine/transport"
	"github.com/spoolmq/spool/internal/buildinfo"
)

// Format is a protocol or an on-disk format and the version of it this
// build reads and writes.
type Format struct {
	Name    string `json:"name" yaml:"name"`
	Version int    `json:"version" yaml:"version"`
	// What says where the format is used.
	What string `json:"what" yaml:"what"`
}

// Formats lists the peer protocol and the data formats this build speaks.
// A peer or a file of another version is refused (docs/replication.md,
// docs/storage-format.md).
func Formats() []Format {
	return []Format{
		{"peer-protocol", transport.ProtocolVersion, "spool.cluster.v1 handshake (Hello) and Join"},
		{"log", log.FormatVersion, "segment files: the data dir's FORMAT file and every batch header"},
		{"raft-state", raft.StateVersion, "a replica's hard state and membership file"},
		{"raft-snapshot", raft.SnapshotVersion, "a replica's snapshot file header"},
		{"identity", cluster.IdentityVersion, "the node's identity.json"},
		{"group-offsets", groups.OffsetsVersion, "a consumer group's offsets file"},
	}
}

// ClusterVersions is the range of cluster versions this release speaks
// (engine/meta; docs/upgrading.md).
func ClusterVersions() (lowest, highest uint32) {
	return meta.MinClusterVersion, meta.MaxClusterVersion
}

// Info is what `version --json` prints.
type Info struct {
	Version   string   `json:"version" yaml:"version"`
	Commit    string   `json:"commit" yaml:"commit"`
	GoVersion string   `json:"go_version" yaml:"go_version"`
	Formats   []Format `json:"formats" yaml:"formats"`
}

// Get returns this binary's Info.
func Get() Info {
	return Info{Version: buildinfo.Version, Commit: buildinfo.Commit(), GoVersion: buildinfo.GoVersion(), Formats: Formats()}
}

// Text is Info as `version` prints it: the release on the first line, then
// one format a line.
func (i Info) Text(program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (commit %s, %s)\n", program, i.Version, i.Commit, i.GoVersion)
	for _, f := range i.Formats {
		fmt.Fprintf(&b, "  %-14s %d  %s\n", f.Name, f.Version, f.What)
	}
	return b.String()
}
