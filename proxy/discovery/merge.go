package discovery

import (
	"slices"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

// Merge merges the docs of the healthy servers into the view clients see, as
// Kubernetes 1.36 peer-aggregated discovery does: servers in ID order; group,
// version and resource order preserved by a deterministic order-preserving
// merge (ties broken lexically); verbs and subresources of a resource listed
// differently by two servers unioned and sorted; everything else from the
// first server listing it. The result does not depend on the order of
// healthy or of docs. Healthy IDs without a doc are ignored. Merge never
// fails; with no usable doc the view is empty.
func Merge(docs map[string]*Doc, healthy []string) *Merged {
	ids := mergeIDs(docs, healthy)
	return newMerged(ids, mergeGroups(ids, docs))
}

// mergeIDs returns the sorted, distinct healthy IDs that have a doc.
func mergeIDs(docs map[string]*Doc, healthy []string) []string {
	ids := make([]string, 0, len(healthy))
	for _, id := range healthy {
		if docs[id] != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// mergeGroups runs the apiserver's own merge so that skewgate's merged view
// is byte-for-byte what a 1.36 server would serve for the same inputs.
// aggregated exports it only under a test-flavoured name; it is a pure
// function (no feature gates, metrics or logging), and TestMergeMatches1_36
// pins the behaviour we rely on, so a change upstream fails our tests rather
// than silently changing the view. The lowest ID plays "local": the
// apiserver sorts all IDs and lets the first win, so this is no special case.
func mergeGroups(ids []string, docs map[string]*Doc) []apidiscoveryv2.APIGroupDiscovery {
	if len(ids) == 0 {
		return nil
	}
	peers := make(map[string][]apidiscoveryv2.APIGroupDiscovery, len(ids)-1)
	for _, id := range ids[1:] {
		peers[id] = docs[id].Groups()
	}
	return aggregated.TestMergeResources(ids[0], docs[ids[0]].Groups(), peers)
}

// withStale adds to m, marked Stale, every group-version of the away docs
// that m lacks, and every resource they list in a group-version m has
// without it: a type a rollback took from a group-version the old version
// serves too (1.37's podcertificaterequests in certificates.k8s.io/v1)
// must not vanish for the grace, or the namespace controller deletes a
// namespace past its objects. Such a group-version keeps its freshness:
// aggregated discovery marks freshness per group-version only, and Stale
// would fail discovery of the types the live servers do serve there
// (kubectl could not resolve certificatesigningrequests for the grace);
// listed, the held type answers its 503 (rule 5), and the garbage
// collector and the namespace controller wait on that as on a Stale
// group-version. Groups, versions and resources keep the away docs' order
// after m's.
func withStale(m *Merged, away []*Doc) *Merged {
	groups := append(slices.Clone(m.API().Items), m.APIs().Items...)
	index := map[string]int{}
	for i, g := range groups {
		index[g.Name] = i
	}
	for _, d := range away {
		if d == nil {
			continue
		}
		for _, g := range d.Groups() {
			i, ok := index[g.Name]
			if !ok {
				index[g.Name] = len(groups)
				i = len(groups)
				g.Versions = nil
				groups = append(groups, g)
			}
			for _, v := range d.versionsOf(g.Name) {
				j := slices.IndexFunc(groups[i].Versions, func(have apidiscoveryv2.APIVersionDiscovery) bool { return have.Version == v.Version })
				if j < 0 {
					v.Freshness = apidiscoveryv2.DiscoveryFreshnessStale
					groups[i].Versions = append(slices.Clone(groups[i].Versions), v)
					continue
				}
				have := groups[i].Versions[j]
				added := false
				for _, r := range v.Resources {
					if !slices.ContainsFunc(have.Resources, func(h apidiscoveryv2.APIResourceDiscovery) bool { return h.Resource == r.Resource }) {
						have.Resources = append(slices.Clone(have.Resources), r)
						added = true
					}
				}
				if added {
					groups[i].Versions = slices.Clone(groups[i].Versions)
					groups[i].Versions[j] = have
				}
			}
		}
	}
	return newMerged(m.Servers(), groups)
}
