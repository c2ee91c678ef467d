package discovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

func fetcher(s *httptest.Server) *HTTPFetcher {
	return &HTTPFetcher{Client: s.Client(), BaseURL: s.URL}
}

// TestFetchRealHandler fetches from kube-apiserver's own discovery serving
// code (ResourceManager behind WrapAggregatedDiscoveryToHandler), so content
// type, ETag, 304 and the nopeer profile are the real ones.
func TestFetchRealHandler(t *testing.T) {
	doc := newDoc()
	core, named := aggregated.NewResourceManager("api"), aggregated.NewResourceManager("apis")
	core.SetGroups(doc.API.Items)
	named.SetGroups(doc.APIs.Items)
	mux := http.NewServeMux()
	mux.Handle("/api", aggregated.WrapAggregatedDiscoveryToHandler(http.NotFoundHandler(), core, nil))
	mux.Handle("/apis", aggregated.WrapAggregatedDiscoveryToHandler(http.NotFoundHandler(), named, nil))
	s := httptest.NewServer(mux)
	defer s.Close()

	got, err := fetcher(s).Fetch(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.APIs.Format != FormatV2 || got.APIs.ETag == "" || got.API.ETag == "" {
		t.Fatalf("format %q, etags %q %q", got.APIs.Format, got.API.ETag, got.APIs.ETag)
	}
	// ResourceManager orders groups by priority then name; compare as sets.
	if !sameNames(got.Groups(), doc.Groups()) {
		t.Errorf("fetched %v, want %v", namesOf(got.Groups()), namesOf(doc.Groups()))
	}
	again, err := fetcher(s).Fetch(context.Background(), got)
	if err != nil || again != got {
		t.Errorf("unchanged server: got new doc %p (err %v), want the previous one", again, err)
	}
}

func namesOf(groups []apidiscoveryv2.APIGroupDiscovery) []string {
	return names(apidiscoveryv2.APIGroupDiscoveryList{Items: groups})
}

func sameNames(a, b []apidiscoveryv2.APIGroupDiscovery) bool {
	return slices.Equal(slices.Sorted(slices.Values(namesOf(a))), slices.Sorted(slices.Values(namesOf(b))))
}

// A 1.36 server answers v2 without profile=nopeer with its merged peer view.
func TestFetchAsksForNoPeerView(t *testing.T) {
	s := newFakeServer(t, &fakeServer{local: oldDoc(), peerView: newDoc(), formats: []string{"v2"}})
	got, err := fetcher(s).Fetch(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Groups(), oldDoc().Groups()) {
		t.Errorf("fetched the peer view %v", namesOf(got.Groups()))
	}
}

func TestFetchFallsBackToV2Beta1(t *testing.T) {
	s := newFakeServer(t, &fakeServer{local: newDoc(), formats: []string{"v2beta1", "legacy"}})
	got, err := fetcher(s).Fetch(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.API.Format != FormatV2Beta1 || got.APIs.Format != FormatV2Beta1 {
		t.Errorf("format %q/%q, want v2beta1", got.API.Format, got.APIs.Format)
	}
	if !reflect.DeepEqual(got.Groups(), newDoc().Groups()) {
		t.Errorf("v2beta1 conversion changed the doc: %v", namesOf(got.Groups()))
	}
}

func TestFetchFallsBackToLegacy(t *testing.T) {
	doc := newDoc()
	// metrics.k8s.io is listed, but its APIService answers 503; x.example.com
	// is listed but answers 404, as after an apiserver restart.
	doc.APIs.Items[2] = group("metrics.k8s.io", version("v1beta1", res("pods", "", "PodMetrics", apidiscoveryv2.ScopeNamespace, []string{"get", "list"})))
	doc.APIs.Items = append(doc.APIs.Items, group("x.example.com", version("v1", res("things", "", "Thing", apidiscoveryv2.ScopeCluster, rwVerbs))))
	s := newFakeServer(t, &fakeServer{local: doc, formats: []string{"legacy"}, gvStatus: map[string]int{
		"/apis/metrics.k8s.io/v1beta1": http.StatusServiceUnavailable,
		"/apis/x.example.com/v1":       http.StatusNotFound,
	}})
	got, err := fetcher(s).Fetch(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.APIs.Format != FormatLegacy || got.APIs.ETag != "" {
		t.Errorf("format %q etag %q", got.APIs.Format, got.APIs.ETag)
	}
	c := NewCapabilities(got)
	for _, tc := range []struct {
		gvr  schema.GroupVersionResource
		sub  string
		want bool
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "exec", true},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "scale", true},
		{schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}, "", true},
		{schema.GroupVersionResource{Group: "metrics.k8s.io", Version: "v1beta1", Resource: "pods"}, "", false},
		{schema.GroupVersionResource{Group: "x.example.com", Version: "v1", Resource: "things"}, "", false},
	} {
		if got := c.Serves(tc.gvr, tc.sub); got != tc.want {
			t.Errorf("Serves(%v, %q) = %v, want %v", tc.gvr, tc.sub, got, tc.want)
		}
	}
	stale := schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}
	if !slices.Equal(c.StaleGroupVersions(), []schema.GroupVersion{stale}) {
		t.Errorf("stale = %v, want metrics.k8s.io/v1beta1", c.StaleGroupVersions())
	}
	if c.ServesGroup("x.example.com") {
		t.Error("a group whose only version answers 404 is served")
	}
}

func TestFetchConditional(t *testing.T) {
	f := &fakeServer{local: oldDoc(), formats: []string{"v2"}}
	s := newFakeServer(t, f)
	first, err := fetcher(s).Fetch(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.local = newDoc() // an upgrade: /apis changes, /api does not
	f.mu.Unlock()
	second, err := fetcher(s).Fetch(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || !reflect.DeepEqual(second.Groups(), newDoc().Groups()) {
		t.Fatal("changed /apis not fetched")
	}
	if second.API.ETag != first.API.ETag || second.APIs.ETag == first.APIs.ETag {
		t.Error("ETags not tracked per endpoint")
	}
	if !slices.Contains(f.inm, first.API.ETag) || !slices.Contains(f.inm, first.APIs.ETag) {
		t.Errorf("If-None-Match not sent: %v", f.inm)
	}
}

func TestFetchBadPeer(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"status 500":   func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) },
		"html":         respond("text/html", "<html>"),
		"bad json":     respond(aggregatedJSON("v2"), `{"kind":`),
		"wrong kind":   respond(aggregatedJSON("v2"), `{"kind":"Status","apiVersion":"v1"}`),
		"other group":  respond("application/json;g=x.io;v=v2;as=APIGroupDiscoveryList", `{}`),
		"unknown v":    respond(aggregatedJSON("v3"), `{}`),
		"bad media":    respond("application/json;;;=", `{}`),
		"304 no etag":  func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) },
		"legacy lies":  respond("application/json", `[1,2,3]`),
		"legacy kind":  respond("application/json", `{"kind":"Status"}`),
		"too large":    respond(aggregatedJSON("v2"), `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[`+strings.Repeat(" ", 4096)+`]}`),
		"core in apis": respond(aggregatedJSON("v2"), `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"x"}}]}`),
		"dup version":  respond(aggregatedJSON("v2"), `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"versions":[{"version":"v1"},{"version":"v1"}]}]}`),
		"no resource":  respond(aggregatedJSON("v2"), `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"versions":[{"version":"v1","resources":[{}]}]}]}`),
	} {
		t.Run(name, func(t *testing.T) {
			s := httptest.NewServer(h)
			defer s.Close()
			f := fetcher(s)
			f.MaxBodyBytes = 1024
			doc, err := f.Fetch(context.Background(), nil)
			if err == nil || doc != nil {
				t.Fatalf("Fetch = %v, %v; want an error", doc, err)
			}
			if !strings.Contains(err.Error(), s.URL) {
				t.Errorf("error %q does not name the server", err)
			}
			if name == "too large" && !errors.Is(err, ErrBodyTooLarge) {
				t.Errorf("error %v is not ErrBodyTooLarge", err)
			}
		})
	}
}

func aggregatedJSON(v string) string {
	return "application/json;g=apidiscovery.k8s.io;v=" + v + ";as=APIGroupDiscoveryList"
}

func respond(contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write([]byte(body))
	}
}

func TestFetchUnreachable(t *testing.T) {
	s := httptest.NewServer(http.NotFoundHandler())
	s.Close()
	if _, err := fetcher(s).Fetch(context.Background(), nil); err == nil {
		t.Fatal("no error from a closed server")
	}
}

// FuzzDecode: no body makes the decoders panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"versions":[{"version":"v1","resources":[{"resource":"pods","subresources":[{}]}]}]}]}`))
	f.Add([]byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2beta1","items":[{"versions":[null]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, format := range []Format{FormatV2, FormatV2Beta1} {
			if items, err := decodeAggregated(format, body); err == nil {
				_ = validate("/apis", items)
				NewCapabilities(&Doc{APIs: Endpoint{Items: items}})
			}
		}
	})
}
