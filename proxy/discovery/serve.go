package discovery

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	clientdiscovery "k8s.io/client-go/discovery"
)

// Merged is the merged discovery view of the healthy servers. It is
// immutable and serves concurrent requests.
type Merged struct {
	servers []string
	api     view
	apis    view
	legacy  metav1.APIGroupList
}

// view is one endpoint's list and the ETag computed as kube-apiserver does.
type view struct {
	list apidiscoveryv2.APIGroupDiscoveryList
	etag string
}

func newMerged(servers []string, groups []apidiscoveryv2.APIGroupDiscovery) *Merged {
	var core, named []apidiscoveryv2.APIGroupDiscovery
	for _, g := range groups {
		if g.Name == "" {
			core = append(core, g)
		} else {
			named = append(named, g)
		}
	}
	m := &Merged{servers: servers, api: newView(core), apis: newView(named)}
	m.legacy = legacyGroupList(m.apis.list)
	return m
}

// newView hashes the list like the apiserver's calculateETag (unexported
// there): SHA-512 of the JSON of the items, so the tag is the same for every
// encoding, which is why responses carry Vary: Accept.
func newView(items []apidiscoveryv2.APIGroupDiscovery) view {
	list := apidiscoveryv2.APIGroupDiscoveryList{Items: items}
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	body, err := json.Marshal(list)
	if err != nil {
		return view{list: list} // unreachable for these types; served without ETag
	}
	return view{list: list, etag: fmt.Sprintf("%X", sha512.Sum512(body))}
}

// legacyGroupList derives the unaggregated /apis group list with client-go's
// own conversion: Stale versions are left out, the preferred version is the
// first Current one, and groups with no Current version are dropped.
func legacyGroupList(list apidiscoveryv2.APIGroupDiscoveryList) metav1.APIGroupList {
	groups, _, _ := clientdiscovery.SplitGroupsAndResources(list)
	out := metav1.APIGroupList{Groups: []metav1.APIGroup{}}
	for _, g := range groups.Groups {
		if len(g.Versions) > 0 {
			out.Groups = append(out.Groups, g)
		}
	}
	return out
}

// Servers returns the sorted IDs of the servers merged into the view.
func (m *Merged) Servers() []string { return m.servers }

// API returns the merged /api list (the core group). Do not modify it.
func (m *Merged) API() apidiscoveryv2.APIGroupDiscoveryList { return m.api.list }

// APIs returns the merged /apis list (named groups). Do not modify it.
func (m *Merged) APIs() apidiscoveryv2.APIGroupDiscoveryList { return m.apis.list }

// LegacyGroupList returns the merged view as an unaggregated APIGroupList.
func (m *Merged) LegacyGroupList() metav1.APIGroupList { return m.legacy }

// LegacyGroup returns the merged view's unaggregated /apis/<name> group.
func (m *Merged) LegacyGroup(name string) (metav1.APIGroup, bool) {
	for _, g := range m.legacy.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return metav1.APIGroup{}, false
}

// ServeLegacyGroup answers an unaggregated /apis/<g> request with g,
// negotiated like the apiserver's.
func ServeLegacyGroup(w http.ResponseWriter, r *http.Request, g metav1.APIGroup) {
	responsewriters.WriteObjectNegotiated(codecs, negotiation.DefaultEndpointRestrictions,
		schema.GroupVersion{}, w, r, http.StatusOK, &g, false)
}

// ServeHTTP answers an aggregated discovery request for /api or /apis (by
// r.URL.Path; other paths get 404) with the merged view, negotiated by the
// apiserver's own code: apidiscovery.k8s.io/v2 as JSON, YAML or protobuf,
// ETag, If-None-Match → 304, Vary: Accept. v2beta1 is not offered: the
// apiserver library locks it off as 1.35+ servers do. A request that does not
// ask for aggregated discovery gets a 406 Status; use WantsAggregated first.
func (m *Merged) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api", "/api/":
		serveView(m.api, w, r)
	case "/apis", "/apis/":
		serveView(m.apis, w, r)
	default:
		http.NotFound(w, r)
	}
}

func serveView(v view, w http.ResponseWriter, r *http.Request) {
	mediaType, _, err := negotiation.NegotiateOutputMediaType(r, codecs, aggregated.DiscoveryEndpointRestrictions)
	if err == nil && !aggregated.IsAggregatedDiscoveryGVK(mediaType.Convert) {
		err = negotiation.NewNotAcceptableError([]string{clientdiscovery.AcceptV2})
	}
	if err != nil {
		responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{}, w, r)
		return
	}
	// A copy per request: encoding sets the TypeMeta of the object it is
	// given, and the cached list is shared by concurrent requests.
	list := v.list
	if v.etag == "" {
		responsewriters.WriteObjectNegotiated(codecs, aggregated.DiscoveryEndpointRestrictions,
			mediaType.Convert.GroupVersion(), w, r, http.StatusOK, &list, true)
		return
	}
	aggregated.ServeHTTPWithETag(&list, v.etag, mediaType.Convert.GroupVersion(), codecs, w, r)
}

// ServeLegacyAPIs answers an unaggregated /apis request with the merged
// APIGroupList, negotiated like the apiserver's (JSON, YAML, protobuf), so
// clients that do not ask for aggregated discovery still see peer-only
// groups. Unlike kube-apiserver it lists no serverAddressByClientCIDRs: the
// merged view has no single server address to offer.
func (m *Merged) ServeLegacyAPIs(w http.ResponseWriter, r *http.Request) {
	list := m.legacy
	responsewriters.WriteObjectNegotiated(codecs, negotiation.DefaultEndpointRestrictions,
		schema.GroupVersion{}, w, r, http.StatusOK, &list, false)
}

// WantsAggregated tells, with the apiserver's negotiation, whether r asks
// for aggregated discovery (apidiscovery.k8s.io/v2 in any encoding), and if
// so whether it asks for the server's local view only (profile=nopeer), which
// the proxy passes to the local server. The proxy serves the merged view when
// aggregated && !nopeer.
func WantsAggregated(r *http.Request) (aggregatedView, nopeer bool) {
	mediaType, ok := negotiation.NegotiateMediaTypeOptions(r.Header.Get("Accept"),
		codecs.SupportedMediaTypes(), aggregated.DiscoveryEndpointRestrictions)
	if !ok || !aggregated.IsAggregatedDiscoveryGVK(mediaType.Convert) {
		return false, false
	}
	return true, mediaType.Profile == "nopeer"
}
