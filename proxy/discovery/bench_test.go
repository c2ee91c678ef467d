package discovery

import (
	"os"
	"path/filepath"
	"testing"
)

// realDoc is the local discovery a real kube-apiserver of version v
// answered (testdata, recorded from the lab).
func realDoc(tb testing.TB, v string) *Doc {
	tb.Helper()
	read := func(name string) Endpoint {
		data, err := os.ReadFile(filepath.Join("testdata", v+"-"+name+"-v2.json"))
		if err != nil {
			tb.Fatal(err)
		}
		items, err := decodeAggregated(FormatV2, data)
		if err != nil {
			tb.Fatal(err)
		}
		return Endpoint{Items: items, Format: FormatV2}
	}
	return &Doc{API: read("api"), APIs: read("apis")}
}

// BenchmarkMerge3 builds merged discovery for three real servers (one
// v1.35.4, two v1.36.3), as skewgate does whenever a server's discovery or
// health changes.
func BenchmarkMerge3(b *testing.B) {
	docs := map[string]*Doc{"a": realDoc(b, "v1.35.4"), "b": realDoc(b, "v1.36.3"), "c": realDoc(b, "v1.36.3")}
	healthy := []string{"a", "b", "c"}
	b.ReportAllocs()
	for b.Loop() {
		if m := Merge(docs, healthy); len(m.APIs().Items) == 0 {
			b.Fatal("empty merge")
		}
	}
}
