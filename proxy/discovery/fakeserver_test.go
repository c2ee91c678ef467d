package discovery

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientdiscovery "k8s.io/client-go/discovery"
)

// fakeServer answers discovery like a kube-apiserver of a given age: it
// walks the Accept clauses in order and answers the first format it speaks.
// Edge cases are easier to provoke here than with the real handler, which
// TestFetchRealHandler covers.
type fakeServer struct {
	local    *Doc
	peerView *Doc // served to v2 requests without profile=nopeer (1.36)
	formats  []string
	// gvStatus overrides the status of a legacy /apis/<g>/<v>.
	gvStatus map[string]int

	mu       sync.Mutex
	requests map[string]int
	inm      []string // If-None-Match values seen
}

func newFakeServer(t *testing.T, f *fakeServer) *httptest.Server {
	f.requests = map[string]int{}
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests[r.URL.Path]++
	if v := r.Header.Get("If-None-Match"); v != "" {
		f.inm = append(f.inm, v)
	}
	f.mu.Unlock()
	for _, clause := range strings.Split(r.Header.Get("Accept"), ",") {
		for _, format := range f.formats {
			if matches(clause, format) {
				f.serve(w, r, format, strings.Contains(clause, "profile=nopeer"))
				return
			}
		}
	}
	w.WriteHeader(http.StatusNotAcceptable)
}

func matches(clause, format string) bool {
	switch format {
	case "v2", "v2beta1":
		return strings.Contains(clause, "g=apidiscovery.k8s.io") && strings.Contains(clause, "v="+format+";")
	}
	return strings.TrimSpace(clause) == "application/json"
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request, format string, nopeer bool) {
	doc := f.local
	if f.peerView != nil && !nopeer {
		doc = f.peerView
	}
	switch {
	case format == "legacy":
		f.serveLegacy(w, r, doc)
	case r.URL.Path == "/api":
		writeAggregated(w, r, format, doc.API.Items)
	case r.URL.Path == "/apis":
		writeAggregated(w, r, format, doc.APIs.Items)
	default:
		http.NotFound(w, r)
	}
}

func writeAggregated(w http.ResponseWriter, r *http.Request, format string, items []apidiscoveryv2.APIGroupDiscovery) {
	// A v2beta1 body is a v2 body with its apiVersion changed: the two types
	// are identical field for field (see apidiscoveryV2Beta1).
	list := apidiscoveryv2.APIGroupDiscoveryList{Items: items}
	list.APIVersion = schema.GroupVersion{Group: apidiscoveryv2.SchemeGroupVersion.Group, Version: format}.String()
	list.Kind = listKind
	body, _ := json.Marshal(&list)
	etag := fmt.Sprintf("%q", fmt.Sprintf("%X", sha256.Sum256(body)))
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v="+format+";as=APIGroupDiscoveryList")
	_, _ = w.Write(body)
}

// serveLegacy derives the unaggregated documents with client-go's conversion.
func (f *fakeServer) serveLegacy(w http.ResponseWriter, r *http.Request, doc *Doc) {
	if code, ok := f.gvStatus[r.URL.Path]; ok {
		w.WriteHeader(code)
		return
	}
	groups, resources, _ := clientdiscovery.SplitGroupsAndResources(apidiscoveryv2.APIGroupDiscoveryList{Items: doc.Groups()})
	var obj any
	switch path := r.URL.Path; {
	case path == "/api":
		obj = &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions", APIVersion: "v1"}, Versions: []string{"v1"}}
	case path == "/apis":
		groups.Groups = groups.Groups[1:] // the core group is not in /apis
		groups.TypeMeta = metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}
		obj = groups
	default:
		gv, _ := schema.ParseGroupVersion(strings.TrimPrefix(strings.TrimPrefix(path, "/apis/"), "/api/"))
		list, ok := resources[gv]
		if !ok {
			http.NotFound(w, r)
			return
		}
		list.TypeMeta = metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}
		obj = list
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}
