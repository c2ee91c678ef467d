package membership

import (
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

// maxReleases bounds the releases kept (the oldest seen go first): a
// cluster runs one or two at a time, a rollback goes back one minor.
const maxReleases = 16

// Release is what a kube-apiserver of one version served itself, as
// skewgate last read it from a healthy server of that version: its
// discovery's built-in types, so that a rollback plan between any two
// versions the cluster ran needs no table compiled into skewgate.
type Release struct {
	// Version is the server's /version gitVersion, e.g. "v1.37.2".
	Version string `json:"version"`
	// Server is the member it was read from, Read when.
	Server string    `json:"server"`
	Read   time.Time `json:"read"`
	// Types are the built-in types it listed, sorted, as "v1/pods" and
	// "apps/v1/deployments".
	Types []string `json:"types"`
}

// ReleaseOf is what caps lists of the groups builtIn counts, as read from
// server at read.
func ReleaseOf(version, server string, read time.Time, caps *discovery.Capabilities, builtIn route.BuiltInGroups) Release {
	r := Release{Version: version, Server: server, Read: read, Types: []string{}}
	for _, gv := range caps.GroupVersions() {
		if !builtIn.BuiltIn(gv.Group) {
			continue
		}
		for _, res := range caps.Resources(gv) {
			if !strings.Contains(res, "/") { // subresources go with their resource
				r.Types = append(r.Types, TypeString(gv.WithResource(res)))
			}
		}
	}
	slices.Sort(r.Types)
	r.Types = slices.Compact(r.Types)
	return r
}

// TypeString is "v1/pods" for the core group, "apps/v1/deployments" else.
func TypeString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// recordRelease keeps what server id, healthy and just read, serves as
// its version's release. Call with m.mu held.
func (m *Members) recordRelease(id, version string, caps *discovery.Capabilities, now time.Time) {
	if version == "" || caps == nil {
		return
	}
	r := ReleaseOf(version, id, now, caps, m.builtIn.groups)
	if prev, ok := m.releases[version]; ok && slices.Equal(prev.Types, r.Types) {
		return // unchanged: the state file is not rewritten for it
	}
	if m.releases == nil {
		m.releases = map[string]Release{}
	}
	m.releases[version] = r
	m.trimReleases()
}

// trimReleases drops the releases read longest ago past maxReleases. Call
// with m.mu held.
func (m *Members) trimReleases() {
	for len(m.releases) > maxReleases {
		oldest := slices.MinFunc(slices.Collect(maps.Values(m.releases)), func(a, b Release) int { return a.Read.Compare(b.Read) })
		delete(m.releases, oldest.Version)
	}
}

// restoreReleases adds the releases an earlier run saw, keeping what this
// run read itself.
func (m *Members) restoreReleases(saved []Release) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range saved {
		if _, ok := m.releases[r.Version]; ok || r.Version == "" {
			continue
		}
		if m.releases == nil {
			m.releases = map[string]Release{}
		}
		m.releases[r.Version] = r
	}
	m.trimReleases()
}

// Releases returns what each version the cluster ran served, as this
// skewgate (and the earlier runs its state file kept) read it, sorted by
// version.
func (m *Members) Releases() []Release {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.releases))
	slices.SortFunc(out, func(a, b Release) int { return strings.Compare(a.Version, b.Version) })
	return out
}
