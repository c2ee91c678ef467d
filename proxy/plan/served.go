package plan

import (
	"context"
	"fmt"
	"net/http"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientdiscovery "k8s.io/client-go/discovery"

	"github.com/skewgate/skewgate/proxy/discovery"
)

// Served is what the cluster serves, as a client reads its discovery.
type Served struct {
	// Types maps each served type to whether it is namespaced.
	Types map[schema.GroupVersionResource]bool
	// Via says who answered: skewgate's merged view of every server, or
	// one kube-apiserver (which may lack what only its peers serve).
	Via string
}

// ReadServed reads /api and /apis as aggregated discovery v2 without
// profile=nopeer: through skewgate (X-Skewgate-Route: merged) that is
// every healthy server's types merged, so a type only some members serve
// is counted. Stale group-versions (an APIService whose backend is down)
// are left out: nobody serves them now.
func ReadServed(ctx context.Context, c *http.Client, host string) (*Served, error) {
	s := &Served{Types: map[schema.GroupVersionResource]bool{}}
	merged := true
	for _, path := range []string{"/api", "/apis"} {
		body, h, err := get(ctx, c, host+path, http.Header{"Accept": {clientdiscovery.AcceptV2}})
		if err != nil {
			return nil, fmt.Errorf("discovery: %w", err)
		}
		groups, err := discovery.Decode(path, h.Get("Content-Type"), body)
		if err != nil {
			return nil, fmt.Errorf("discovery %s: %w", path, err)
		}
		merged = merged && h.Get("X-Skewgate-Route") == "merged"
		s.add(groups)
	}
	s.Via = "one kube-apiserver's discovery (not skewgate's merged view: types only its peers serve are not counted)"
	if merged {
		s.Via = "skewgate's merged discovery of every healthy apiserver"
	}
	return s, nil
}

func (s *Served) add(groups []apidiscoveryv2.APIGroupDiscovery) {
	for _, g := range groups {
		for _, v := range g.Versions {
			if v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale {
				continue
			}
			for _, r := range v.Resources {
				gvr := schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}
				s.Types[gvr] = r.Scope == apidiscoveryv2.ScopeNamespace
			}
		}
	}
}
