package discovery

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// Format says which discovery protocol a server answered with.
type Format string

const (
	// FormatV2 is aggregated discovery apidiscovery.k8s.io/v2 (Kubernetes ≥ 1.30).
	FormatV2 Format = "v2"
	// FormatV2Beta1 is aggregated discovery apidiscovery.k8s.io/v2beta1
	// (Kubernetes 1.26–1.32; off by default from 1.33, locked off from 1.35),
	// decoded into the v2 types.
	FormatV2Beta1 Format = "v2beta1"
	// FormatLegacy is unaggregated discovery (APIVersions, APIGroupList and
	// one APIResourceList per group-version), converted to v2.
	FormatLegacy Format = "legacy"
)

// Endpoint is what one discovery endpoint (/api or /apis) of one server
// listed, in the server's order.
type Endpoint struct {
	Items []apidiscoveryv2.APIGroupDiscovery
	// ETag is the entity tag the server sent, verbatim (quoted), or "".
	ETag   string
	Format Format
}

// Doc is one server's local discovery. A Doc is never modified after it is
// returned: Merge and Capabilities share its slices.
type Doc struct {
	// API is /api: the core group, whose name is "".
	API Endpoint
	// APIs is /apis: every named group.
	APIs Endpoint
}

// Groups returns the core group followed by the named groups. It allocates.
func (d *Doc) Groups() []apidiscoveryv2.APIGroupDiscovery {
	if d == nil {
		return nil
	}
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(d.API.Items)+len(d.APIs.Items))
	out = append(out, d.API.Items...)
	return append(out, d.APIs.Items...)
}

// versionsOf returns the versions of group name, as listed.
func (d *Doc) versionsOf(name string) []apidiscoveryv2.APIVersionDiscovery {
	for _, g := range d.Groups() {
		if g.Name == name {
			return g.Versions
		}
	}
	return nil
}
