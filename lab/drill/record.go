package drill

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/route"
)

// Outcome classes of one answer, as the report counts them.
const (
	OK          = "ok"          // 2xx, or a genuine 4xx (conflict, object not found, forbidden)
	False404    = "false 404"   // 404 for a resource type some live server, or one that left within the grace, serves
	Unavailable = "503"         // 503 Status: temporarily unavailable, retry
	Error       = "other error" // transport errors, 5xx other than 503, 404s of the wrong kind
)

// event is one answered request.
type event struct {
	at      time.Time
	phase   string
	kind    string // list, watch, create, update, delete, discovery, …
	gvr     schema.GroupVersionResource
	code    int
	route   string // X-Skewgate-Route, "" without skewgate
	server  string // X-Skewgate-Server
	latency time.Duration
	outcome string
}

// recorder classifies and keeps every answer of one mode's run.
type recorder struct {
	classifier *route.Classifier
	// served reports whether gvr is served by a server that is live or
	// left within the grace window, at the time of the answer; an empty
	// resource asks for the group/version.
	served func(schema.GroupVersionResource) bool

	mu     sync.Mutex
	phase  string
	events []event
}

func newRecorder(served func(schema.GroupVersionResource) bool) *recorder {
	return &recorder{classifier: route.NewClassifier(), served: served, phase: "start"}
}

func (r *recorder) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// notFoundResource is the apiserver's message when it does not serve the
// resource type at all, as opposed to an object that does not exist.
var notFoundResource = []byte("the server could not find the requested resource")

// RoundTripper records every exchange that passes through it.
func (r *recorder) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		e := event{at: start, latency: time.Since(start)}
		info, cerr := r.classifier.Classify(req)
		e.kind = kindOf(req, info.Kind)
		if cerr == nil {
			switch info.Kind {
			case route.Resource:
				e.gvr = info.GVR
			case route.DiscoveryGroup, route.OpenAPIGroupVersion:
				e.gvr = info.GV.WithResource("")
			}
		}
		if err != nil {
			if req.Context().Err() == nil {
				e.outcome = Error
				r.add(e)
			}
			return nil, err
		}
		e.code, e.route, e.server = resp.StatusCode, resp.Header.Get("X-Skewgate-Route"), resp.Header.Get("X-Skewgate-Server")
		var body []byte
		if resp.StatusCode == http.StatusNotFound {
			body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
		e.outcome = r.classify(e, body)
		r.add(e)
		return resp, nil
	})
}

func (r *recorder) classify(e event, body []byte) string {
	switch {
	case e.code == http.StatusServiceUnavailable:
		return Unavailable
	case e.code == http.StatusNotFound && bytes.Contains(body, notFoundResource):
		if e.gvr.Group != "" || e.gvr.Version != "" {
			if r.served(e.gvr) {
				return False404
			}
		}
		return OK // a genuine 404: nobody serves it
	case e.code < 400 || e.code == http.StatusNotFound || e.code == http.StatusConflict || e.code == http.StatusForbidden:
		return OK
	}
	return Error
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	e.phase = r.phase
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// snapshot returns the events so far, in time order.
func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.events)
	slices.SortFunc(out, func(a, b event) int { return a.at.Compare(b.at) })
	return out
}

func kindOf(req *http.Request, k route.Kind) string {
	switch {
	case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
		return "watch"
	case k == route.DiscoveryRoot || k == route.DiscoveryGroup:
		return "discovery"
	case req.Method == http.MethodGet:
		return "read"
	case req.Method == http.MethodDelete:
		return "delete"
	}
	return "write"
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
