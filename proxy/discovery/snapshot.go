package discovery

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Snapshot is an immutable view of a Store. Do not modify its maps or
// slices.
type Snapshot struct {
	// Servers maps every known server ID, healthy or not, to its state.
	Servers map[string]ServerState
	// IDs lists the keys of Servers, sorted.
	IDs []string
	// Healthy is the sorted healthy set last given to SetHealthy.
	Healthy []string
	// Merged is the merged view of the healthy servers; never nil.
	Merged *Merged
}

func newSnapshot(servers map[string]ServerState, healthy []string, merged *Merged) *Snapshot {
	return &Snapshot{
		Servers: servers,
		IDs:     slices.Sorted(maps.Keys(servers)),
		Healthy: healthy,
		Merged:  merged,
	}
}

// Capabilities returns server id's capabilities from its last-known-good
// doc, or nil (which serves nothing) if it has none.
func (s *Snapshot) Capabilities(id string) *Capabilities {
	return s.Servers[id].Capabilities
}

// ServersServing returns, sorted, the IDs of all known servers, healthy or
// not, whose last-known-good doc serves the resource (and subresource).
// Routing needs the unhealthy ones too: capable-but-unreachable is a 503,
// not a 404.
func (s *Snapshot) ServersServing(gvr schema.GroupVersionResource, subresource string) []string {
	var out []string
	for _, id := range s.IDs {
		if s.Servers[id].Capabilities.Serves(gvr, subresource) {
			out = append(out, id)
		}
	}
	return out
}

// ServersServingGroupVersion is ServersServing for a group-version, for
// routing /apis/<g>/<v>. Use Capabilities(id).ServesGroup for /apis/<g>.
func (s *Snapshot) ServersServingGroupVersion(gv schema.GroupVersion) []string {
	var out []string
	for _, id := range s.IDs {
		if s.Servers[id].Capabilities.ServesGroupVersion(gv) {
			out = append(out, id)
		}
	}
	return out
}
