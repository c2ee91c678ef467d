package discovery

import (
	"slices"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resourceKey names a resource or, with sub set, one of its subresources.
type resourceKey struct {
	gvr schema.GroupVersionResource
	sub string
}

// Capabilities answers what one server serves. It is immutable and safe for
// concurrent use; all methods accept a nil receiver (a server never fetched
// serves nothing). Lookups are single map reads and do not allocate.
type Capabilities struct {
	verbs  map[resourceKey][]string
	scope  map[schema.GroupVersionResource]bool // namespaced
	names  map[schema.GroupVersion][]string     // sorted resources and resource/subresources
	gvs    map[schema.GroupVersion]bool
	groups map[string]bool
	order  []schema.GroupVersion
	stale  []schema.GroupVersion
}

// NewCapabilities indexes a server's doc. Stale group-versions are recorded
// but not served (see the package documentation).
func NewCapabilities(doc *Doc) *Capabilities {
	c := &Capabilities{
		verbs:  map[resourceKey][]string{},
		scope:  map[schema.GroupVersionResource]bool{},
		names:  map[schema.GroupVersion][]string{},
		gvs:    map[schema.GroupVersion]bool{},
		groups: map[string]bool{},
	}
	for _, g := range doc.Groups() {
		for _, v := range g.Versions {
			c.addVersion(g.Name, v)
		}
	}
	return c
}

func (c *Capabilities) addVersion(group string, v apidiscoveryv2.APIVersionDiscovery) {
	gv := schema.GroupVersion{Group: group, Version: v.Version}
	if v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale {
		c.stale = append(c.stale, gv)
		return
	}
	c.gvs[gv] = true
	c.groups[group] = true
	c.order = append(c.order, gv)
	var names []string
	for _, r := range v.Resources {
		gvr := gv.WithResource(r.Resource)
		c.verbs[resourceKey{gvr: gvr}] = r.Verbs
		c.scope[gvr] = r.Scope == apidiscoveryv2.ScopeNamespace
		names = append(names, r.Resource)
		for _, s := range r.Subresources {
			c.verbs[resourceKey{gvr: gvr, sub: s.Subresource}] = s.Verbs
			names = append(names, r.Resource+"/"+s.Subresource)
		}
	}
	slices.Sort(names)
	c.names[gv] = slices.Compact(names)
}

// Namespaced reports whether the resource is namespaced, and whether the
// server serves it at all.
func (c *Capabilities) Namespaced(gvr schema.GroupVersionResource) (namespaced, ok bool) {
	if c == nil {
		return false, false
	}
	namespaced, ok = c.scope[gvr]
	return namespaced, ok
}

// Resources lists, sorted, the resources and "resource/subresource"s the
// server's document for gv lists. The slice is shared: do not modify it.
func (c *Capabilities) Resources(gv schema.GroupVersion) []string {
	if c == nil {
		return nil
	}
	return c.names[gv]
}

// Serves reports whether the server serves the resource and, when
// subresource is not empty, that subresource of it. A subresource counts only
// if discovery lists it; kube-apiserver lists every subresource it installs.
func (c *Capabilities) Serves(gvr schema.GroupVersionResource, subresource string) bool {
	_, ok := c.lookup(gvr, subresource)
	return ok
}

// Verbs returns the verbs discovery lists for the resource or subresource,
// and whether it is served at all. The slice is shared: do not modify it.
// Route on Serves; verbs differ between versions mostly by addition, so they
// serve to explain a decision or to prefer a server, not to deny one.
func (c *Capabilities) Verbs(gvr schema.GroupVersionResource, subresource string) ([]string, bool) {
	return c.lookup(gvr, subresource)
}

func (c *Capabilities) lookup(gvr schema.GroupVersionResource, sub string) ([]string, bool) {
	if c == nil {
		return nil, false
	}
	verbs, ok := c.verbs[resourceKey{gvr: gvr, sub: sub}]
	return verbs, ok
}

// ServesGroupVersion reports whether the server serves the group-version
// (Current, not Stale), for routing /apis/<g>/<v> and /api/<v>.
func (c *Capabilities) ServesGroupVersion(gv schema.GroupVersion) bool {
	return c != nil && c.gvs[gv]
}

// ServesGroup reports whether the server serves any version of the group,
// for routing /apis/<g>.
func (c *Capabilities) ServesGroup(group string) bool {
	return c != nil && c.groups[group]
}

// GroupVersions lists the served group-versions in discovery order, core
// first. The slice is shared: do not modify it.
func (c *Capabilities) GroupVersions() []schema.GroupVersion {
	if c == nil {
		return nil
	}
	return c.order
}

// StaleGroupVersions lists the group-versions the server marks Stale.
// The slice is shared: do not modify it.
func (c *Capabilities) StaleGroupVersions() []schema.GroupVersion {
	if c == nil {
		return nil
	}
	return c.stale
}
