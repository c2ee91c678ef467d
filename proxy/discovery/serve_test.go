package discovery

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientdiscovery "k8s.io/client-go/discovery"
)

const acceptProtobufV2 = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func mergedFixture() *Merged {
	return Merge(map[string]*Doc{"a": oldDoc(), "b": newDoc()}, []string{"a", "b"})
}

func get(h http.HandlerFunc, path, accept, inm string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Header.Set("Accept", accept)
	if inm != "" {
		r.Header.Set("If-None-Match", inm)
	}
	w := httptest.NewRecorder()
	h(w, r)
	return w
}

func TestServeJSONAndETag(t *testing.T) {
	m := mergedFixture()
	w := get(m.ServeHTTP, "/apis", clientdiscovery.AcceptV2, "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); !strings.Contains(ct, "v=v2") || !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	etag := w.Header().Get("ETag")
	if !strings.HasPrefix(etag, `"`) || w.Header().Get("Vary") != "Accept" {
		t.Errorf("ETag %q, Vary %q", etag, w.Header().Get("Vary"))
	}
	items, err := decodeAggregated(FormatV2, w.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := namesOf(items); !slices.Contains(got, "scheduling.k8s.io/v1alpha2/workloads") || slices.Contains(got, "") {
		t.Errorf("/apis lists %v", got)
	}
	if w := get(m.ServeHTTP, "/apis", clientdiscovery.AcceptV2, etag); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("If-None-Match: status %d, %d bytes", w.Code, w.Body.Len())
	}
	if w := get(m.ServeHTTP, "/apis", clientdiscovery.AcceptV2, `"other"`); w.Code != http.StatusOK {
		t.Errorf("stale If-None-Match: status %d", w.Code)
	}
	api := get(m.ServeHTTP, "/api", clientdiscovery.AcceptV2, "")
	core, err := decodeAggregated(FormatV2, api.Body.Bytes())
	if err != nil || len(core) != 1 || core[0].Name != "" || api.Header().Get("ETag") == etag {
		t.Errorf("/api: %v %v, ETag %q", namesOf(core), err, api.Header().Get("ETag"))
	}
}

func TestServeETagDependsOnContent(t *testing.T) {
	a := Merge(map[string]*Doc{"a": oldDoc()}, []string{"a"})
	b := mergedFixture()
	again := mergedFixture()
	etag := func(m *Merged) string {
		return get(m.ServeHTTP, "/apis", clientdiscovery.AcceptV2, "").Header().Get("ETag")
	}
	if etag(a) == etag(b) || etag(b) != etag(again) {
		t.Error("ETag is not a function of the merged content")
	}
}

func TestServeProtobuf(t *testing.T) {
	w := get(mergedFixture().ServeHTTP, "/apis", acceptProtobufV2, "")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/vnd.kubernetes.protobuf") {
		t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	obj, _, err := codecs.UniversalDeserializer().Decode(w.Body.Bytes(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, ok := obj.(*apidiscoveryv2.APIGroupDiscoveryList)
	if !ok || !slices.Contains(namesOf(list.Items), "scheduling.k8s.io/v1alpha2/workloads") {
		t.Errorf("decoded %T %v", obj, obj)
	}
}

func TestServeNotAggregated(t *testing.T) {
	for _, accept := range []string{"application/json", acceptV2Beta1} {
		w := get(mergedFixture().ServeHTTP, "/apis", accept, "")
		if w.Code != http.StatusNotAcceptable {
			t.Errorf("Accept %q: status %d, want 406", accept, w.Code)
		}
	}
	if w := get(mergedFixture().ServeHTTP, "/apis/apps", clientdiscovery.AcceptV2, ""); w.Code != http.StatusNotFound {
		t.Errorf("/apis/apps: status %d", w.Code)
	}
}

func TestWantsAggregated(t *testing.T) {
	for _, tc := range []struct {
		accept             string
		aggregated, nopeer bool
	}{
		{clientdiscovery.AcceptV2, true, false},
		{clientdiscovery.AcceptV2NoPeer, true, true},
		{acceptLocal, true, true},
		{clientdiscovery.AcceptV2 + "," + clientdiscovery.AcceptV1, true, false},
		{acceptProtobufV2, true, false},
		{acceptV2Beta1, false, false}, // locked off since 1.35, as on the servers
		{"application/json", false, false},
		{"", false, false},
		{"*/*", false, false},
		{"application/yaml", false, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/apis", nil)
		r.Header.Set("Accept", tc.accept)
		agg, nopeer := WantsAggregated(r)
		if agg != tc.aggregated || nopeer != tc.nopeer {
			t.Errorf("WantsAggregated(%q) = %v, %v; want %v, %v", tc.accept, agg, nopeer, tc.aggregated, tc.nopeer)
		}
	}
}

func TestServeLegacyAPIs(t *testing.T) {
	w := get(mergedFixture().ServeLegacyAPIs, "/apis", "application/json", "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	var list metav1.APIGroupList
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "APIGroupList" || list.APIVersion != "v1" {
		t.Errorf("TypeMeta %+v", list.TypeMeta)
	}
	var gvs []string
	for _, g := range list.Groups {
		for _, v := range g.Versions {
			gvs = append(gvs, v.GroupVersion)
		}
	}
	want := []string{"apps/v1", "scheduling.k8s.io/v1", "scheduling.k8s.io/v1alpha2"}
	if !slices.Equal(gvs, want) {
		t.Errorf("group-versions %v, want %v (stale metrics.k8s.io left out)", gvs, want)
	}
	pb := get(mergedFixture().ServeLegacyAPIs, "/apis", runtime.ContentTypeProtobuf, "")
	if !strings.HasPrefix(pb.Header().Get("Content-Type"), runtime.ContentTypeProtobuf) {
		t.Errorf("protobuf Content-Type %q", pb.Header().Get("Content-Type"))
	}
}
