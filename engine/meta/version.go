package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Cluster versions. A cluster runs two releases side by side while its
// nodes are upgraded one at a time, so behaviour that a node of the older
// release cannot follow (a new command, a new field in the controller's
// state, a new raft id rule, a new peer message, a new data format) must
// stay off until every member runs a release that has it. The cluster
// version is that switch: a number in the controller's state (1 until the
// first finalization), raised by one command, FinalizeVersion, once every
// member speaks the higher version, and never lowered. Each release speaks
// a range of cluster versions, [MinClusterVersion, MaxClusterVersion], and
// each node advertises its range to its peers (the transport's Hello); a
// node that advertises none is a 0.1.0 node, which speaks version 1 only.
//
// New behaviour asks State.Enabled(feature) and does the old thing while it
// is false; docs/architecture.md, "Cluster versions", has the rule.
const (
	// MinClusterVersion is the lowest cluster version this release can
	// join: it still does everything a cluster at this version needs.
	MinClusterVersion uint32 = 1
	// MaxClusterVersion is the highest cluster version this release knows.
	MaxClusterVersion uint32 = 2
)

// VersionRange is the cluster versions a release speaks, Min to Max.
type VersionRange struct{ Min, Max uint32 }

// Speaks is the range of this release.
func Speaks() VersionRange { return VersionRange{Min: MinClusterVersion, Max: MaxClusterVersion} }

// Unadvertised is the range of a node that advertises none: a 0.1.0 node,
// which speaks cluster version 1 only.
var Unadvertised = VersionRange{Min: 1, Max: 1}

// Holds reports whether the range speaks version v.
func (r VersionRange) Holds(v uint32) bool { return r.Min <= v && v <= r.Max }

func (r VersionRange) String() string { return fmt.Sprintf("%d..%d", r.Min, r.Max) }

func (r VersionRange) valid() bool { return r.Min >= 1 && r.Min <= r.Max }

// Feature is behaviour that every member must speak before any node uses
// it: it is on from cluster version Since.
type Feature struct {
	Name  string
	Since uint32
}

// Features of cluster version 2 and later; docs/upgrading.md lists them by
// release.
var (
	// VersionedState: the controller's state records the cluster version
	// (EncodeState writes it), and FinalizeVersion is a command. A 0.1.0
	// node refuses both as malformed, so neither is written before every
	// member speaks version 2.
	VersionedState = Feature{Name: "versioned-state", Since: 2}
	// Quiesce: an idle partition's leader quiesces its group (a heartbeat
	// marked quiesce/1, engine/raft). A 0.1.0 follower takes it for a
	// plain heartbeat and keeps ticking, so it would campaign in a group
	// whose leader went quiet: no leader quiesces before every member
	// speaks version 2. (A follower of this release always understands
	// the heartbeat: reading the new thing is allowed.)
	Quiesce = Feature{Name: "quiesce", Since: 2}
	// ScheduledDelivery: a publish may carry a delivery time (the record
	// header spool-deliver-at-ms, docs/scheduling.md). A 0.1.0 sidecar
	// does not know the header and delivers such a message at once, so
	// no sidecar takes a scheduled publish before every member speaks
	// version 2.
	ScheduledDelivery = Feature{Name: "scheduled-delivery", Since: 2}
)

// features are the features by name (FeatureNamed).
var features = []Feature{VersionedState, Quiesce, ScheduledDelivery}

// FeatureNamed is the feature called name.
func FeatureNamed(name string) (Feature, bool) {
	for _, f := range features {
		if f.Name == name {
			return f, true
		}
	}
	return Feature{}, false
}

// At reports whether cluster version v turns f on.
func (f Feature) At(v uint32) bool { return v >= f.Since }

// ClusterVersion is the cluster's version: 1 until the first FinalizeVersion.
func (s *State) ClusterVersion() uint32 { return max(s.version, 1) }

// Enabled reports whether the cluster's version turns feature f on. It is
// the one gate new behaviour consults.
func (s *State) Enabled(f Feature) bool { return f.At(s.ClusterVersion()) }

// FinalizeVersion raises the cluster version to Version. Members lists
// every node of the cluster, by increasing id, with the range it
// advertised when the command was proposed (PlanFinalize); Apply refuses
// (ErrVersion) the command when a node is missing from it or does not
// speak Version — a node joined meanwhile, or one was rolled back — and
// when Version is not above the cluster's.
type FinalizeVersion struct {
	Version uint32
	Members []MemberVersions
}

// MemberVersions is the range of cluster versions one node advertised.
type MemberVersions struct {
	Node   NodeID
	Speaks VersionRange
}

// ErrVersion: a cluster version that cannot be had: a FinalizeVersion some
// member does not speak, or nothing to finalize; a node or a state whose
// versions do not meet. A *VersionError says which.
var ErrVersion = errors.New("meta: cluster version")

// VersionError says why a cluster version cannot be had. It matches
// ErrVersion with errors.Is.
type VersionError struct {
	// Cluster is the cluster's version; Want the version asked for (0: none).
	Cluster, Want uint32
	// Node is the node that does not speak Want (0: none); Speaks its range,
	// Unknown when it has not advertised one to the proposer yet.
	Node    NodeID
	Speaks  VersionRange
	Unknown bool
}

func (e *VersionError) Error() string {
	switch {
	case e.Node != 0 && e.Unknown:
		return fmt.Sprintf("meta: cannot finalize cluster version %d: node %d has not said which cluster versions it speaks (unreachable, or not connected yet): bring it up, or decommission it", e.Want, e.Node)
	case e.Node != 0:
		return fmt.Sprintf("meta: cannot finalize cluster version %d: node %d speaks cluster versions %s only: upgrade it first (docs/upgrading.md)", e.Want, e.Node, e.Speaks)
	case e.Want == 0 || e.Want <= e.Cluster:
		return fmt.Sprintf("meta: nothing to finalize: the cluster is at version %d, and its nodes speak no higher version", e.Cluster)
	}
	return fmt.Sprintf("meta: cluster version %d cannot be finalized at version %d", e.Want, e.Cluster)
}

// Is makes errors.Is(err, ErrVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// PlanFinalize gives the FinalizeVersion to propose: the highest version
// every node of the cluster speaks, with their ranges. speaks holds the
// range each node advertised (a node missing from it has not advertised
// one). A *VersionError says why there is none: the cluster is at that
// version already, or a node does not speak a higher one (the first such
// node is named).
func PlanFinalize(s *State, speaks map[NodeID]VersionRange) (FinalizeVersion, error) {
	cur := s.ClusterVersion()
	f := FinalizeVersion{Version: MaxClusterVersion}
	for _, n := range s.nodes {
		r, ok := speaks[n.ID]
		if !ok {
			if cur < MaxClusterVersion {
				return FinalizeVersion{}, &VersionError{Cluster: cur, Want: cur + 1, Node: n.ID, Unknown: true}
			}
			continue
		}
		f.Version = min(f.Version, r.Max)
		f.Members = append(f.Members, MemberVersions{Node: n.ID, Speaks: r})
	}
	if f.Version <= cur {
		i := slices.IndexFunc(f.Members, func(m MemberVersions) bool { return m.Speaks.Max <= cur })
		if i < 0 || cur >= MaxClusterVersion {
			return FinalizeVersion{}, &VersionError{Cluster: cur}
		}
		return FinalizeVersion{}, &VersionError{Cluster: cur, Want: cur + 1, Node: f.Members[i].Node, Speaks: f.Members[i].Speaks}
	}
	return f, nil
}

// validate checks what depends on the command alone.
func (f FinalizeVersion) validate() error {
	if f.Version < 2 {
		return invalid("cluster version", fmt.Sprint(f.Version), "2 or more (version 1 is every cluster's first)")
	}
	if len(f.Members) > MaxNodes {
		return invalid("members", fmt.Sprint(len(f.Members)), fmt.Sprintf("at most %d (MaxNodes)", MaxNodes))
	}
	for i, m := range f.Members {
		if m.Node == 0 || i > 0 && m.Node <= f.Members[i-1].Node {
			return invalid("members", fmt.Sprint(m.Node), "node ids (1 up) in increasing order")
		}
		if !m.Speaks.valid() {
			return invalid(fmt.Sprintf("node %d's cluster versions", m.Node), m.Speaks.String(), "min..max with 1 <= min <= max")
		}
	}
	return nil
}

// applyFinalize raises the cluster version when every node speaks it.
func (s *State) applyFinalize(f FinalizeVersion) Result {
	cur := s.ClusterVersion()
	if f.Version <= cur {
		return Result{Err: &VersionError{Cluster: cur, Want: f.Version}}
	}
	for _, n := range s.nodes {
		i, ok := slices.BinarySearchFunc(f.Members, n.ID, func(m MemberVersions, id NodeID) int { return cmp.Compare(m.Node, id) })
		if !ok {
			return Result{Err: &VersionError{Cluster: cur, Want: f.Version, Node: n.ID, Unknown: true}}
		}
		if r := f.Members[i].Speaks; !r.Holds(f.Version) {
			return Result{Err: &VersionError{Cluster: cur, Want: f.Version, Node: n.ID, Speaks: r}}
		}
	}
	s.version = f.Version
	return Result{}
}

// CheckSpeaks says whether a release speaking r can be a member of a
// cluster at version v: nil, or a clear refusal (ErrVersion) naming both.
func CheckSpeaks(v uint32, r VersionRange) error {
	if r.Holds(v) {
		return nil
	}
	what := "it is too old: upgrade it to a release that speaks version " + fmt.Sprint(v)
	if r.Min > v {
		what = "it is too new: run a release that still speaks version " + fmt.Sprint(v) + " until the cluster is finalized at a version it speaks"
	}
	return fmt.Errorf("%w: the cluster is at cluster version %d, and the node's release speaks cluster versions %s: %s (docs/upgrading.md)", ErrVersion, v, r, what)
}
