// Package admin serves skewgate's admin listener: metrics, health, and the
// routing state explained for people (/debug/routes, /debug/explain).
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/healthz"

	"github.com/skewgate/skewgate/proxy/drain"
	"github.com/skewgate/skewgate/proxy/headercount"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/route"
)

// Options configure the admin endpoints.
type Options struct {
	// Steering is the kernel side's state, shown under /debug/routes and
	// /debug/explain (nil: none, as without steering).
	Steering func() *SteeringView
	// Profiling serves /debug/pprof/.
	Profiling bool
	// Version is skewgate's own version, shown under /debug/routes.
	Version string
}

// Handler serves the admin endpoints. /healthz, /livez and /readyz are
// kube-apiserver's own handlers (k8s.io/apiserver healthz): named checks,
// ?verbose, ?exclude= and /readyz/<check>. Ready means skewgate knows what
// every member serves: before that it cannot tell a false 404 from a
// genuine one, so steering waits for it too.
func Handler(m *membership.Members, gather prometheus.Gatherer, o Options) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	healthz.InstallHandler(mux, healthz.PingHealthz)
	healthz.InstallLivezHandler(mux, healthz.PingHealthz)
	healthz.InstallReadyzHandler(mux, healthz.PingHealthz,
		healthz.NamedCheck("discovery", func(*http.Request) error { return m.Ready() }))
	mux.HandleFunc("/debug/routes", func(w http.ResponseWriter, _ *http.Request) {
		v := Routes(m, o.Steering)
		v.Version = o.Version
		writeJSON(w, v)
	})
	mux.HandleFunc("/debug/explain", func(w http.ResponseWriter, r *http.Request) { explain(w, r, m, o.Steering) })
	if o.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// ListenFunc opens a listener on addr: net.Listen's, or one that takes
// the socket a predecessor handed over.
type ListenFunc func(addr string) (net.Listener, error)

func tcpListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// Serve serves h on addr until ctx ends, then stops without dropping a
// request it accepted (drain). The listener has no authentication: a
// non-loopback addr is logged as a warning. listen opens it (nil:
// net.Listen).
func Serve(ctx context.Context, addr string, listen ListenFunc, h http.Handler, log *slog.Logger) error {
	if listen == nil {
		listen = tcpListen
	}
	ln, err := listen(addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && !ap.Addr().IsLoopback() {
		log.Warn("the admin listener is not on loopback and has no authentication", "address", ln.Addr().String())
	}
	// The write timeout leaves room for a 30 s CPU profile.
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 90 * time.Second}
	headercount.Set(hs)
	srv := drain.Track(hs)
	go srv.Serve(ln)
	stopWith(ctx, srv, ln)
	return nil
}

// stopWith stops srv once ctx ends, giving what it serves a few seconds
// to finish.
func stopWith(ctx context.Context, srv *drain.Server, ln net.Listener) {
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Stop(sctx, ln) != nil {
			srv.Close()
		}
	})
}

// ServerView is one server in /debug/routes.
type ServerView struct {
	membership.Status
	DiscoveryAge   string `json:"discoveryAge,omitempty"`
	DiscoveryError string `json:"discoveryError,omitempty"`
	// DiscoveryRestored: the discovery is the previous run's (the state
	// file), not yet confirmed by a fetch.
	DiscoveryRestored bool     `json:"discoveryRestored,omitempty"`
	GroupVersions     []string `json:"groupVersions"`
}

// RouteView is one resource in the merged routing table.
type RouteView struct {
	Resource string     `json:"resource"`
	Route    string     `json:"route"`
	Servers  []string   `json:"servers"`
	Rule     route.Rule `json:"rule"`
}

// RoutesView is /debug/routes.
type RoutesView struct {
	// Version is skewgate's own version ("" from a skewgate before it
	// said so).
	Version string       `json:"version,omitempty"`
	Local   string       `json:"local"`
	Servers []ServerView `json:"servers"`
	Routes  []RouteView  `json:"routes"`
	// Grace lists the types the rollback grace holds (503, not 404),
	// and until when.
	Grace []membership.GraceType `json:"grace,omitempty"`
	// GraceOverride is the cluster's rollback-grace-until, if set.
	GraceOverride *time.Time `json:"graceOverride,omitempty"`
	// Window is the skew window the members make, which mode auto steers
	// during (nil from a skewgate before it said so).
	Window *WindowView `json:"window,omitempty"`
	// StateFile is how the state file's last write went (absent: no
	// state file is kept).
	StateFile *membership.StateFileStatus `json:"stateFile,omitempty"`
	// Steering is the kernel side's state (absent without steering, and
	// from a skewgate before v0.2, which had an untyped "extra").
	Steering *SteeringView `json:"steering,omitempty"`
	// BuiltIn is which groups count as kube-apiserver's own, and from
	// where (nil from a skewgate before it said so).
	BuiltIn *membership.BuiltInView `json:"builtIn,omitempty"`
	// Releases are what each version the cluster ran served, as read
	// from its servers: what rollback-plan compares.
	Releases []membership.Release `json:"releases,omitempty"`
}

// WindowView is the skew window in /debug/routes.
type WindowView struct {
	Open bool `json:"open"`
	// Reason says which members differ, or differed last while closed.
	Reason string `json:"reason,omitempty"`
	// Until is when an open window closes if the members keep agreeing;
	// absent while they differ.
	Until *time.Time `json:"until,omitempty"`
}

// Routes describes every server and the decision for every resource any
// server serves.
func Routes(m *membership.Members, steering func() *SteeringView) RoutesView {
	snap, table := m.Discovery(), m.Table()
	v := RoutesView{Local: m.LocalID()}
	seen := map[schema.GroupVersionResource]bool{}
	var gvrs []schema.GroupVersionResource
	for _, st := range m.Statuses() {
		ds := snap.Servers[st.ID]
		sv := ServerView{Status: st}
		if !ds.FetchedAt.IsZero() {
			sv.DiscoveryAge = time.Since(ds.FetchedAt).Round(time.Millisecond).String()
		}
		if ds.Err != nil {
			sv.DiscoveryError = ds.Err.Error()
		}
		sv.DiscoveryRestored = ds.Restored
		for _, gv := range ds.Capabilities.GroupVersions() {
			sv.GroupVersions = append(sv.GroupVersions, gv.String())
		}
		v.Servers = append(v.Servers, sv)
		if ds.Doc == nil {
			continue
		}
		for _, g := range ds.Doc.Groups() {
			for _, ver := range g.Versions {
				for _, r := range ver.Resources {
					gvr := schema.GroupVersionResource{Group: g.Name, Version: ver.Version, Resource: r.Resource}
					if !seen[gvr] {
						seen[gvr] = true
						gvrs = append(gvrs, gvr)
					}
				}
			}
		}
	}
	slices.SortFunc(gvrs, func(a, b schema.GroupVersionResource) int { return strings.Compare(a.String(), b.String()) })
	for _, gvr := range gvrs {
		d := route.Decide(route.Request{Kind: route.Resource, Verb: "list", GVR: gvr}, table, false, "")
		v.Routes = append(v.Routes, RouteView{Resource: gvrString(gvr), Route: string(d.Route), Servers: d.Servers, Rule: d.Rule})
	}
	v.Grace = m.InGrace()
	w := m.Window()
	v.Window = &WindowView{Open: w.Open, Reason: w.Reason}
	if !w.Until.IsZero() {
		v.Window.Until = &w.Until
	}
	if until, ok := m.GraceUntil(); ok {
		v.GraceOverride = &until
	}
	if sf, ok := m.StateFile(); ok {
		v.StateFile = &sf
	}
	b := m.BuiltIn()
	v.BuiltIn, v.Releases = &b, m.Releases()
	if steering != nil {
		v.Steering = steering()
	}
	return v
}

func gvrString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// Explanation is /debug/explain.
type Explanation struct {
	Method      string     `json:"method"`
	Path        string     `json:"path"`
	Kind        string     `json:"kind"`
	Verb        string     `json:"verb"`
	Resource    string     `json:"resource,omitempty"`
	Subresource string     `json:"subresource,omitempty"`
	Route       string     `json:"route"`
	Rule        route.Rule `json:"rule"`
	Servers     []string   `json:"servers"`
	Reason      string     `json:"reason"`
	// Steering is whether such a request, on a new connection to the
	// node's apiserver address, reaches skewgate at all now: the kernel
	// side's state, mode, window and targets (absent without steering).
	Steering *SteeringView `json:"steering,omitempty"`
}

// verbMethods maps Kubernetes verbs to the HTTP method that carries them.
var verbMethods = map[string]string{
	"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT",
	"patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE",
}

func explain(w http.ResponseWriter, r *http.Request, m *membership.Members, steering func() *SteeringView) {
	verb, path := r.URL.Query().Get("verb"), r.URL.Query().Get("path")
	method, ok := verbMethods[strings.ToLower(verb)]
	if !ok {
		method = strings.ToUpper(verb)
	}
	u, err := url.ParseRequestURI(path)
	if err != nil || method == "" {
		http.Error(w, "want ?verb=<verb or method>&path=<request path>", http.StatusBadRequest)
		return
	}
	if strings.EqualFold(verb, "watch") {
		q := u.Query()
		q.Set("watch", "true")
		u.RawQuery = q.Encode()
	}
	req, err := route.NewClassifier().Classify(&http.Request{Method: method, URL: u})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d := route.Decide(req, m.Table(), false, "")
	e := Explanation{Method: method, Path: u.String(), Kind: req.Kind.String(), Verb: req.Verb,
		Subresource: req.Subresource, Route: string(d.Route), Rule: d.Rule, Servers: d.Servers, Reason: d.Reason}
	if req.Kind == route.Resource {
		e.Resource = gvrString(req.GVR)
	}
	if steering != nil {
		e.Steering = steering()
	}
	writeJSON(w, e)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
