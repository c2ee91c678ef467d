package drill

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// Outcome classes of one answer, as the report counts them.
const (
	OK          = "ok"          // 2xx, or a genuine 4xx (conflict, object not found, forbidden)
	False404    = "false 404"   // a type-not-found 404 while a live, ready server served the type
	Grace404    = "grace 404"   // a type-not-found 404 while only a server that left within the grace served it (a rollback)
	Unavailable = "503"         // 503 Status: temporarily unavailable, retry
	Error       = "other error" // transport errors, 5xx other than 503
)

// Causes of a 503, from its message.
const (
	CauseLocalAway   = "local server away"
	CauseRestarting  = "capable server away or unknown"
	CauseRollback    = "rollback grace"
	CauseLimit       = "peer limit or breaker"
	CauseUnreachable = "server unreachable"
	CauseOther       = "other"
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
	cause   string // of a 503
	// pinned names the node a pinned client talks to ("" for the load
	// balancer's clients).
	pinned string
	// detail is why it failed: the transport error, or the status and
	// the start of the body.
	detail string
	// live: a live server served the requested type when it was
	// answered (a 503 then failed a request that could have been served).
	live bool
	// node is the node whose address the request's connection reached
	// ("" if it got none: a dial that failed); connAt is when the drill
	// first saw that connection (its first request).
	node   string
	connAt time.Time
}

// recorder classifies and keeps every answer of one mode's run.
type recorder struct {
	classifier *route.Classifier
	// served reports whether gvr is served by a server that is live, and
	// whether by one that left within the grace window, at the time of
	// the answer; an empty resource asks for the group/version.
	served func(schema.GroupVersionResource) (live, grace bool)

	// nodes names the node of each address clients dial.
	nodes map[netip.Addr]string

	mu     sync.Mutex
	phase  string
	events []event
	// conns holds when each connection was first seen.
	conns map[net.Conn]time.Time
}

func newRecorder(served func(schema.GroupVersionResource) (bool, bool), nodes map[netip.Addr]string) *recorder {
	return &recorder{classifier: route.NewClassifier(), served: served, nodes: nodes, phase: "start", conns: map[net.Conn]time.Time{}}
}

// traced returns req traced so that e learns the node its connection
// reached and when the drill first saw that connection. Transports call
// GotConn in RoundTrip, before it returns.
func (r *recorder) traced(req *http.Request, e *event) *http.Request {
	got := func(info httptrace.GotConnInfo) {
		now := time.Now()
		r.mu.Lock()
		at, ok := r.conns[info.Conn]
		if !ok {
			at = now
			r.conns[info.Conn] = at
		}
		r.mu.Unlock()
		var node string
		if ap, err := netip.ParseAddrPort(info.Conn.RemoteAddr().String()); err == nil {
			node = r.nodes[ap.Addr().Unmap()]
		}
		e.node, e.connAt = node, at
	}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: got}))
}

func (r *recorder) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// RoundTripper records every exchange of the load balancer's clients.
func (r *recorder) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return r.pinnedTo("", next)
}

// Pinned returns a wrapper recording the exchanges of a client pinned to
// node.
func (r *recorder) Pinned(node string) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper { return r.pinnedTo(node, next) }
}

func (r *recorder) pinnedTo(node string, next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		var e event
		resp, err := next.RoundTrip(r.traced(req, &e))
		e.at, e.latency, e.pinned = start, time.Since(start), node
		if e.node == "" {
			e.node = node // a pinned client dials its node's address only
		}
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
				e.outcome, e.detail = Error, err.Error()
				r.add(e)
			}
			return nil, err
		}
		e.code, e.route, e.server = resp.StatusCode, resp.Header.Get("X-Skewgate-Route"), resp.Header.Get("X-Skewgate-Server")
		var body []byte
		if resp.StatusCode >= 400 {
			body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
		e.outcome = r.classify(&e, body)
		if e.outcome != OK {
			e.detail = resp.Status + ": " + string(body[:min(len(body), 160)])
		}
		r.add(e)
		return resp, nil
	})
}

func (r *recorder) classify(e *event, body []byte) string {
	switch {
	case e.code == http.StatusServiceUnavailable:
		e.cause = cause503(body)
		e.live, _ = r.served(e.gvr)
		return Unavailable
	case e.code == http.StatusNotFound && forward.TypeNotFound(&http.Response{StatusCode: e.code, Body: io.NopCloser(bytes.NewReader(body))}):
		if e.gvr.Group != "" || e.gvr.Version != "" {
			switch live, grace := r.served(e.gvr); {
			case live:
				return False404
			case grace:
				return Grace404
			}
		}
		return OK // a genuine 404: nobody serves it
	case e.code < 400 || e.code == http.StatusNotFound || e.code == http.StatusConflict || e.code == http.StatusForbidden:
		return OK
	}
	return Error
}

// cause503 sorts a 503 by what its message says (skewgate's Status
// messages; the in-tree proxy's and the apiserver's own are "other").
func cause503(body []byte) string {
	switch b := string(body); {
	case strings.Contains(b, "local server is away"):
		return CauseLocalAway
	case strings.Contains(b, "before they restarted on another version"):
		return CauseRollback
	case strings.Contains(b, "only unhealthy or departed peers"), strings.Contains(b, "is not known yet"), strings.Contains(b, "not known yet may"):
		return CauseRestarting
	case strings.Contains(b, "circuit open"), strings.Contains(b, "too many requests"):
		return CauseLimit
	case strings.Contains(b, "unreachable"), strings.Contains(b, "forward: "):
		return CauseUnreachable
	}
	return CauseOther
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
