package discovery

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// seedFiles adds every testdata file matching pattern to f's corpus: real
// documents of kube-apiserver v1.35.4 and v1.36.3, read off the lab (and
// v1.35.4's re-encoded as v2beta1: see recordedFixtures).
func seedFiles(f *testing.F, pattern string) {
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed files %s: %v", pattern, err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzAggregatedDocument: whatever a server (or a lying peer) answers, the
// decode either fails or yields a document whose capabilities and merge
// are built without a panic, and the merge of a valid document with itself
// lists exactly its groups.
func FuzzAggregatedDocument(f *testing.F) {
	seedFiles(f, "*-v2.json")
	seedFiles(f, "*-v2beta1.json")
	seedFiles(f, "status-406.json")
	f.Add([]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"x"},"versions":[{"version":"v1","resources":[{"resource":"r"},{"resource":"r"}]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, format := range []Format{FormatV2, FormatV2Beta1} {
			groups, err := decodeAggregated(format, body)
			if err != nil {
				continue
			}
			var named, core = groups[:0:0], groups[:0:0]
			for _, g := range groups {
				if g.Name == "" {
					core = append(core, g)
				} else {
					named = append(named, g)
				}
			}
			if validate("/apis", named) != nil || validate("/api", core) != nil {
				continue
			}
			doc := &Doc{API: Endpoint{Items: core, Format: format}, APIs: Endpoint{Items: named, Format: format}}
			caps := NewCapabilities(doc)
			for _, gv := range caps.GroupVersions() {
				if !caps.ServesGroupVersion(gv) {
					t.Fatalf("lists %s but does not serve it", gv)
				}
			}
			m := Merge(map[string]*Doc{"a": doc, "b": doc}, []string{"a", "b"})
			if got, want := len(m.APIs().Items)+len(m.API().Items), len(doc.Groups()); got != want {
				t.Fatalf("merge of a document with itself has %d groups, want %d", got, want)
			}
		}
	})
}

// FuzzOpenAPIRoots: two roots that parse merge into one that parses and
// lists every path of both.
func FuzzOpenAPIRoots(f *testing.F) {
	seedFiles(f, "*-openapi-v3.json")
	f.Add([]byte(`{"paths":{"apis/x/v1":{"serverRelativeURL":"/openapi/v3/apis/x/v1?hash=1"}}}`))
	f.Add([]byte(`{"paths":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseOpenAPIRoot(data)
		if err != nil {
			return
		}
		b := &OpenAPIRoot{Paths: map[string]json.RawMessage{"apis/only-b/v1": json.RawMessage(`{}`)}}
		merged, err := ParseOpenAPIRoot(MergeOpenAPIRoots(a, b))
		if err != nil {
			t.Fatalf("the merge does not parse: %v", err)
		}
		for p := range a.Paths {
			if _, ok := merged.Paths[p]; !ok {
				t.Fatalf("path %q lost", p)
			}
		}
		if _, ok := merged.Paths["apis/only-b/v1"]; !ok {
			t.Fatal("the second root's path lost")
		}
	})
}
