package discovery

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

func names(list apidiscoveryv2.APIGroupDiscoveryList) []string {
	var out []string
	for _, g := range list.Items {
		out = append(out, g.Name)
		for _, v := range g.Versions {
			out = append(out, g.Name+"/"+v.Version)
			for _, r := range v.Resources {
				out = append(out, g.Name+"/"+v.Version+"/"+r.Resource)
			}
		}
	}
	return out
}

// TestMergeMatches1_36 pins the 1.36 merge semantics Merge relies on.
func TestMergeMatches1_36(t *testing.T) {
	a, b := oldDoc(), newDoc()
	// Server b (new) inserts a group and a resource, and lists pods with an
	// extra verb and subresource, and other short names.
	b.APIs.Items = slices.Insert(b.APIs.Items, 1, group("resource.k8s.io", version("v1",
		res("deviceclasses", "deviceclass", "DeviceClass", apidiscoveryv2.ScopeCluster, rwVerbs))))
	bPods := pods()
	bPods.Verbs = append(slices.Clone(bPods.Verbs), "bind")
	bPods.Subresources = append(bPods.Subresources, sub("resize", "Pod", subVerbs...))
	bPods.ShortNames = []string{"p"}
	b.API.Items[0].Versions[0].Resources[2] = bPods
	b.API.Items[0].Versions[0].Resources = slices.Insert(b.API.Items[0].Versions[0].Resources, 1,
		res("endpoints", "endpoints", "Endpoints", apidiscoveryv2.ScopeNamespace, rwVerbs))

	m := Merge(map[string]*Doc{"a": a, "b": b}, []string{"b", "a"})

	wantAPIs := []string{"apps", "apps/v1", "apps/v1/deployments", "apps/v1/statefulsets",
		"resource.k8s.io", "resource.k8s.io/v1", "resource.k8s.io/v1/deviceclasses",
		"scheduling.k8s.io", "scheduling.k8s.io/v1", "scheduling.k8s.io/v1/priorityclasses",
		"scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha2/podgroups", "scheduling.k8s.io/v1alpha2/workloads",
		"metrics.k8s.io", "metrics.k8s.io/v1beta1"}
	if got := names(m.APIs()); !slices.Equal(got, wantAPIs) {
		t.Errorf("merged /apis order:\n got %v\nwant %v", got, wantAPIs)
	}
	wantAPI := []string{"", "/v1", "/v1/configmaps", "/v1/endpoints", "/v1/namespaces", "/v1/pods"}
	if got := names(m.API()); !slices.Equal(got, wantAPI) {
		t.Errorf("merged /api order:\n got %v\nwant %v", got, wantAPI)
	}
	p := m.API().Items[0].Versions[0].Resources[3]
	if want := []string{"bind", "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}; !slices.Equal(p.Verbs, want) {
		t.Errorf("pods verbs = %v, want sorted union %v", p.Verbs, want)
	}
	var subs []string
	for _, s := range p.Subresources {
		subs = append(subs, s.Subresource)
	}
	if want := []string{"attach", "binding", "eviction", "exec", "log", "resize", "status"}; !slices.Equal(subs, want) {
		t.Errorf("pods subresources = %v, want sorted union %v", subs, want)
	}
	if !slices.Equal(p.ShortNames, []string{"po"}) {
		t.Errorf("pods short names = %v, want the first server's", p.ShortNames)
	}
	if !slices.Equal(m.Servers(), []string{"a", "b"}) {
		t.Errorf("Servers() = %v", m.Servers())
	}
}

func TestMergeHealthyOnly(t *testing.T) {
	docs := map[string]*Doc{"a": oldDoc(), "b": newDoc()}
	m := Merge(docs, []string{"a", "gone", "a"})
	if slices.Contains(names(m.APIs()), "scheduling.k8s.io/v1alpha2") {
		t.Error("an unhealthy server's group-version is in the merged view")
	}
	if !slices.Equal(m.Servers(), []string{"a"}) {
		t.Errorf("Servers() = %v", m.Servers())
	}
	if empty := Merge(docs, nil); len(empty.APIs().Items) != 0 || len(empty.API().Items) != 0 {
		t.Error("merge of no healthy server is not empty")
	}
}

// randomDoc draws a doc from a fixed universe, keeping each server's own
// order consistent with the universe's, as real servers of one lineage do,
// plus occasional swaps so that the merge also meets conflicting orders.
func randomDoc(r *rand.Rand) *Doc {
	doc := &Doc{API: Endpoint{Items: []apidiscoveryv2.APIGroupDiscovery{randomGroup(r, "")}}}
	for _, g := range []string{"apps", "batch", "resource.k8s.io", "scheduling.k8s.io", "x.example.com"} {
		if r.IntN(3) > 0 {
			doc.APIs.Items = append(doc.APIs.Items, randomGroup(r, g))
		}
	}
	if n := len(doc.APIs.Items); n > 1 && r.IntN(4) == 0 {
		i := r.IntN(n - 1)
		doc.APIs.Items[i], doc.APIs.Items[i+1] = doc.APIs.Items[i+1], doc.APIs.Items[i]
	}
	return doc
}

func randomGroup(r *rand.Rand, name string) apidiscoveryv2.APIGroupDiscovery {
	g := group(name)
	for _, v := range []string{"v1", "v1beta1", "v1alpha2"} {
		if len(g.Versions) == 0 || r.IntN(2) == 0 {
			g.Versions = append(g.Versions, randomVersion(r, v))
		}
	}
	return g
}

func randomVersion(r *rand.Rand, v string) apidiscoveryv2.APIVersionDiscovery {
	out := version(v)
	if r.IntN(8) == 0 {
		out.Freshness = apidiscoveryv2.DiscoveryFreshnessStale
	}
	for _, name := range []string{"alphas", "betas", "gammas", "deltas"} {
		if r.IntN(3) == 0 {
			continue
		}
		verbs := slices.DeleteFunc(slices.Clone(rwVerbs), func(string) bool { return r.IntN(4) == 0 })
		var subs []apidiscoveryv2.APISubresourceDiscovery
		for _, s := range []string{"scale", "status"} {
			if r.IntN(2) == 0 {
				subs = append(subs, sub(s, "X", subVerbs...))
			}
		}
		out.Resources = append(out.Resources, res(name, name[:len(name)-1], "X", apidiscoveryv2.ScopeNamespace, verbs, subs...))
	}
	return out
}

// TestMergePermutationInvariant: any order of the healthy IDs and any
// assignment of map insertion order gives the same merged view.
func TestMergePermutationInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 2 + r.IntN(4)
		docs, ids := map[string]*Doc{}, []string{}
		for i := range n {
			id := fmt.Sprintf("apiserver-%c", 'a'+rune(i))
			docs[id], ids = randomDoc(r), append(ids, id)
		}
		want := Merge(docs, ids)
		checkComplete(t, want, docs)
		for range 5 {
			r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			if got := Merge(docs, ids); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: merge depends on server order %v", round, ids)
			}
		}
	}
}

// FuzzMergePermutationInvariant explores more docs and orders than the
// randomized test; run it with go test -fuzz.
func FuzzMergePermutationInvariant(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(3))
	f.Add(uint64(42), uint64(7), uint8(5))
	f.Fuzz(func(t *testing.T, seed, perm uint64, n uint8) {
		r := rand.New(rand.NewPCG(seed, 0))
		docs, ids := map[string]*Doc{}, []string{}
		for i := range 1 + int(n%6) {
			id := fmt.Sprintf("s%d", i)
			docs[id], ids = randomDoc(r), append(ids, id)
		}
		want := Merge(docs, ids)
		p := rand.New(rand.NewPCG(perm, 0))
		p.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		if got := Merge(docs, ids); !reflect.DeepEqual(got, want) {
			t.Fatalf("merge depends on server order %v", ids)
		}
	})
}

// checkComplete: every group, version and resource of every merged server
// is in the merged view.
func checkComplete(t *testing.T, m *Merged, docs map[string]*Doc) {
	t.Helper()
	merged := append(names(m.API()), names(m.APIs())...)
	for id, doc := range docs {
		for _, n := range names(apidiscoveryv2.APIGroupDiscoveryList{Items: doc.Groups()}) {
			if !slices.Contains(merged, n) {
				t.Fatalf("%s's %q missing from the merged view", id, n)
			}
		}
	}
}

func TestLegacyGroup(t *testing.T) {
	m := Merge(map[string]*Doc{"a": oldDoc(), "b": newDoc()}, []string{"a", "b"})
	g, ok := m.LegacyGroup("scheduling.k8s.io")
	var versions []string
	for _, v := range g.Versions {
		versions = append(versions, v.Version)
	}
	if !ok || !slices.Equal(versions, []string{"v1", "v1alpha2"}) || g.PreferredVersion.Version != "v1" {
		t.Errorf("merged scheduling.k8s.io: %v versions %v preferred %q", ok, versions, g.PreferredVersion.Version)
	}
	if _, ok := m.LegacyGroup("metrics.k8s.io"); ok {
		t.Error("a group with only Stale versions is not in the legacy view")
	}
	if _, ok := m.LegacyGroup("nope.example.com"); ok {
		t.Error("an unknown group was found")
	}
}

// A server away within the grace keeps what only it listed in the merged
// view, marked Stale: clients see a failed group-version, not a vanished
// type.
func TestAwayServersStayStale(t *testing.T) {
	s := NewStore()
	s.Record("old", oldDoc(), nil)
	s.Record("new", newDoc(), nil)
	s.SetHealthy([]string{"old"})
	s.SetAway([]*Doc{newDoc()})
	var found bool
	for _, g := range s.Snapshot().Merged.APIs().Items {
		if g.Name != "scheduling.k8s.io" {
			continue
		}
		seen := map[string]int{}
		for _, v := range g.Versions {
			seen[v.Version]++
			switch {
			case v.Version == "v1alpha2" && v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale:
				found = true
			case v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale:
				t.Errorf("%s, served by a healthy server, marked Stale", v.Version)
			}
		}
		for v, n := range seen {
			if n > 1 {
				t.Errorf("version %s listed %d times", v, n)
			}
		}
	}
	if !found {
		t.Error("scheduling.k8s.io/v1alpha2 of the away server missing, or not Stale")
	}
	s.SetAway(nil)
	for _, g := range s.Snapshot().Merged.APIs().Items {
		for _, v := range g.Versions {
			if g.Name == "scheduling.k8s.io" && v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale {
				t.Errorf("%s/%s still Stale once nobody is away", g.Name, v.Version)
			}
		}
	}
}

// Bug, seen in the 1.36 → 1.37 drill: a resource a rolled-back server
// listed in a group-version the others serve too (podcertificaterequests in
// certificates.k8s.io/v1) vanished from the merged view for the grace — 12
// discovery gaps — where a whole group-version stays, Stale. It stays too;
// its group-version stays Current, so the types the live servers serve
// there are still discovered.
func TestAwayResourceInSharedVersionStays(t *testing.T) {
	healthy := group("certificates.k8s.io", version("v1",
		res("certificatesigningrequests", "certificatesigningrequest", "CertificateSigningRequest", apidiscoveryv2.ScopeCluster, rwVerbs)))
	away := group("certificates.k8s.io", version("v1",
		res("certificatesigningrequests", "certificatesigningrequest", "CertificateSigningRequest", apidiscoveryv2.ScopeCluster, rwVerbs),
		res("podcertificaterequests", "podcertificaterequest", "PodCertificateRequest", apidiscoveryv2.ScopeNamespace, rwVerbs)))
	old, gone := oldDoc(), oldDoc()
	old.APIs.Items = append(old.APIs.Items, healthy)
	gone.APIs.Items = append(gone.APIs.Items, away)
	s := NewStore()
	s.Record("old", old, nil)
	s.SetHealthy([]string{"old"})
	s.SetAway([]*Doc{gone})
	got := names(s.Snapshot().Merged.APIs())
	if !slices.Contains(got, "certificates.k8s.io/v1/podcertificaterequests") || !slices.Contains(got, "certificates.k8s.io/v1/certificatesigningrequests") {
		t.Errorf("merged certificates.k8s.io/v1 within the grace: %v", got)
	}
	for _, g := range s.Snapshot().Merged.APIs().Items {
		for _, v := range g.Versions {
			stale := v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale
			if (g.Name == "certificates.k8s.io" || g.Name == "scheduling.k8s.io") && stale {
				t.Errorf("%s/%s Stale: the live servers serve it", g.Name, v.Version)
			}
		}
	}
	if got := names(apidiscoveryv2.APIGroupDiscoveryList{Items: old.APIs.Items}); slices.Contains(got, "certificates.k8s.io/v1/podcertificaterequests") {
		t.Error("the healthy server's own doc changed")
	}
	s.SetAway(nil)
	if got := names(s.Snapshot().Merged.APIs()); slices.Contains(got, "certificates.k8s.io/v1/podcertificaterequests") {
		t.Error("listed once nobody away serves it")
	}
}
