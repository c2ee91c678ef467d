// Package route decides, for one request, which apiserver answers it: the
// routing contract of docs/routing.md as a pure function of the request and a
// snapshot of what every server serves and whether it is healthy.
package route

import (
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Kind is what a request asks for, as far as routing cares.
type Kind int

const (
	// Other is any non-resource request (/version, /healthz, /metrics …): local.
	Other Kind = iota
	// Resource is a request for a resource or subresource.
	Resource
	// DiscoveryRoot is /api or /apis.
	DiscoveryRoot
	// DiscoveryGroup is /apis/<g> or /apis/<g>/<v> (or /api/v1).
	DiscoveryGroup
	// OpenAPIGroupVersion is /openapi/v3/apis/<g>/<v> (or /openapi/v3/api/v1).
	OpenAPIGroupVersion
	// OpenAPIRoot is /openapi/v3, the index of every group-version's schema.
	OpenAPIRoot
)

var kindNames = [...]string{"other", "resource", "discovery-root", "discovery-group", "openapi-group-version", "openapi-root"}

func (k Kind) String() string { return kindNames[k] }

// Request is a classified request.
type Request struct {
	Kind        Kind
	Verb        string
	GVR         schema.GroupVersionResource
	Subresource string
	// GV is set for DiscoveryGroup and OpenAPIGroupVersion; Version is
	// empty for /apis/<g>.
	GV   schema.GroupVersion
	Path string
	// Namespace and Name are the object's, as RequestInfoFactory parsed
	// them from the path.
	Namespace, Name string
	// longRunning is kube-apiserver's own verdict (watch, proxy, and the
	// attach, exec, log, portforward and proxy subresources).
	longRunning bool
}

// LongRunning reports whether kube-apiserver treats the request as long
// running (exempt from its max-requests-inflight): watches, proxying,
// logs and the streaming subresources. Nothing else is, whatever headers
// a client sends.
func (r Request) LongRunning() bool { return r.longRunning }

// connectSubresources answer with what a pod, service or node's backend
// sends, which the caller controls: their 404s say nothing about the type.
var connectSubresources = map[string]bool{"proxy": true, "exec": true, "attach": true, "portforward": true}

// AsksForType reports whether a 404 "the server could not find the
// requested resource" (or the plain "404 page not found") to the request,
// from a server c describes, can only mean that the server lacks the type:
// the request is for a resource in a shape the type's routes take (a
// namespaced resource named without a namespace, or a cluster-scoped one
// under a namespace, have no route on any server, so their 404 is
// genuine), and not through a subresource whose answer is a backend's.
func (r Request) AsksForType(c Capabilities) bool {
	if r.Kind != Resource || connectSubresources[r.Subresource] || c == nil {
		return false
	}
	namespaced, ok := c.Namespaced(r.GVR)
	switch {
	case !ok:
		return false
	case r.GVR.Group == "" && r.GVR.Resource == "namespaces":
		return true // RequestInfoFactory names a namespace's own namespace
	case namespaced:
		return r.Namespace != "" || r.Name == ""
	}
	return r.Namespace == ""
}

// Watch reports whether the request sets up a watch.
func (r Request) Watch() bool { return r.Verb == "watch" }

// Idempotent reports whether the request may be sent again to another
// server when its connection failed before any byte was sent.
func (r Request) Idempotent() bool {
	// RequestInfoFactory names a non-resource GET "get" too.
	switch r.Verb {
	case "get", "list", "watch":
		return true
	}
	return false
}

// Classifier parses requests with apiserver's own RequestInfoFactory, so a
// request is understood exactly as kube-apiserver understands it.
type Classifier struct{ f *request.RequestInfoFactory }

// kube-apiserver's long-running verbs and subresources, as it passes them
// to filters.BasicLongRunningRequestCheck (pkg/controlplane/apiserver/
// options); that package would bring etcd's client into skewgate.
var (
	longRunningVerbs        = sets.NewString("watch", "proxy")
	longRunningSubresources = sets.NewString("attach", "exec", "proxy", "log", "portforward")
)

// longRunning is filters.BasicLongRunningRequestCheck.
func longRunning(info *request.RequestInfo) bool {
	return longRunningVerbs.Has(info.Verb) ||
		info.IsResourceRequest && longRunningSubresources.Has(info.Subresource) ||
		!info.IsResourceRequest && strings.HasPrefix(info.Path, "/debug/pprof/")
}

// NewClassifier returns a Classifier for the standard /api and /apis
// prefixes.
func NewClassifier() *Classifier {
	return &Classifier{f: &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}}
}

// Classify returns what r asks for. It errors only on a request
// RequestInfoFactory cannot parse (kube-apiserver answers those 400 too).
func (c *Classifier) Classify(r *http.Request) (Request, error) {
	info, err := c.f.NewRequestInfo(r)
	if err != nil {
		return Request{}, fmt.Errorf("classify %s %s: %w", r.Method, r.URL.Path, err)
	}
	req := Request{Verb: info.Verb, Path: info.Path, longRunning: longRunning(info)}
	if info.IsResourceRequest {
		req.Kind = Resource
		req.GVR = schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
		req.Subresource, req.Namespace, req.Name = info.Subresource, info.Namespace, info.Name
		return req, nil
	}
	req.Kind, req.GV = classifyPath(info.Path)
	return req, nil
}

// classifyPath sorts non-resource paths into the discovery kinds that
// routing treats specially.
func classifyPath(path string) (Kind, schema.GroupVersion) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/api" || path == "/api/" || path == "/apis" || path == "/apis/":
		return DiscoveryRoot, schema.GroupVersion{}
	case path == "/openapi/v3" || path == "/openapi/v3/":
		return OpenAPIRoot, schema.GroupVersion{}
	case len(parts) == 2 && parts[0] == "api":
		return DiscoveryGroup, schema.GroupVersion{Version: parts[1]}
	case len(parts) == 2 && parts[0] == "apis":
		return DiscoveryGroup, schema.GroupVersion{Group: parts[1]}
	case len(parts) == 3 && parts[0] == "apis":
		return DiscoveryGroup, schema.GroupVersion{Group: parts[1], Version: parts[2]}
	case len(parts) == 4 && parts[0] == "openapi" && parts[1] == "v3" && parts[2] == "api":
		return OpenAPIGroupVersion, schema.GroupVersion{Version: parts[3]}
	case len(parts) == 5 && parts[0] == "openapi" && parts[1] == "v3" && parts[2] == "apis":
		return OpenAPIGroupVersion, schema.GroupVersion{Group: parts[3], Version: parts[4]}
	}
	return Other, schema.GroupVersion{}
}
