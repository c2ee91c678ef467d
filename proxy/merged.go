package proxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// mergedKind is which merged document a request asks for, if any.
type mergedKind int

const (
	notMerged mergedKind = iota
	aggregatedDiscovery
	legacyGroupList
	legacyGroup
	openAPIRoot
)

// wantsMerged picks the requests skewgate answers with a merged document:
// /api and /apis asking for aggregated discovery v2 without profile=nopeer
// (which passes to the local server, as on kube-apiserver 1.36), a legacy
// /apis, a legacy /apis/<g> of a group the local server serves but peers
// serve more versions of, and the /openapi/v3 root.
func wantsMerged(r *http.Request, req route.Request, local route.Capabilities, merged *discovery.Merged) mergedKind {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return notMerged
	}
	switch req.Kind {
	case route.OpenAPIRoot:
		return openAPIRoot
	case route.DiscoveryGroup:
		if req.GV.Version == "" && req.GV.Group != "" && addsVersions(req.GV.Group, local, merged) {
			return legacyGroup
		}
	case route.DiscoveryRoot:
		aggregated, nopeer := discovery.WantsAggregated(r)
		switch {
		case nopeer:
		case aggregated:
			return aggregatedDiscovery
		case r.URL.Path == "/apis" || r.URL.Path == "/apis/":
			return legacyGroupList
		}
	}
	return notMerged // legacy /api (APIVersions) is the same everywhere: local
}

// addsVersions reports whether the merged view lists a version of group the
// local server does not serve, while the local server serves the group (a
// peer-only group is routed to a peer instead, by rule 4).
func addsVersions(group string, local route.Capabilities, merged *discovery.Merged) bool {
	if local == nil || !local.ServesGroup(group) {
		return false
	}
	g, ok := merged.LegacyGroup(group)
	if !ok {
		return false
	}
	for _, v := range g.Versions {
		if !local.ServesGroupVersion(schema.GroupVersion{Group: group, Version: v.Version}) {
			return true
		}
	}
	return false
}

// serveMerged answers a merged document, if r asks for one and the local
// apiserver lets the caller read the original: skewgate's own documents
// must not reach callers the apiserver would refuse. It reports whether it
// answered.
func (h *Handler) serveMerged(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	merged := h.members.Discovery().Merged
	kind := wantsMerged(r, x.req, h.members.Table().Local.Caps, merged)
	if kind == notMerged {
		return false
	}
	// The local server is asked first, then skewgate answers: one ID for
	// both (see forward.EnsureAuditID).
	forward.EnsureAuditID(r.Header)
	if kind != openAPIRoot && !mergesLocal(merged, h.members.LocalID()) {
		// Without the local server's groups the merged view would tell
		// garbage collection and namespace deletion that they are gone:
		// a 200 with too few groups is a false 404 in bulk.
		if h.mayTell(w, r, x) {
			x.decision = route.Decision{Route: route.Unavailable, Rule: route.RuleNotResource, Reason: "merged discovery without the local apiserver's document"}
			forward.Unavailable(w, r, "the local apiserver's discovery is not known: merged discovery would lack its groups")
		}
		return true
	}
	if !h.localAllows(w, r, x) {
		return true
	}
	x.decision = route.Decision{Route: route.Merged, Rule: route.RuleNotResource, Reason: "merged view of the healthy servers"}
	w.Header().Set(forward.HeaderRoute, string(route.Merged))
	w.Header().Set(forward.HeaderServer, selfServer)
	w.Header().Set(forward.HeaderAuditID, r.Header.Get(forward.HeaderAuditID))
	w, rec := record(w)
	switch kind {
	case aggregatedDiscovery:
		merged.ServeHTTP(w, r)
	case legacyGroupList:
		merged.ServeLegacyAPIs(w, r)
	case legacyGroup:
		g, _ := merged.LegacyGroup(x.req.GV.Group)
		discovery.ServeLegacyGroup(w, r, g)
	case openAPIRoot:
		h.serveOpenAPIRoot(w, r, x)
	}
	result := mergedMiss
	if rec.status() == http.StatusNotModified {
		result = mergedHit
	}
	h.metrics.merged.WithLabelValues(result).Inc()
	return true
}

// localAllows asks the local apiserver the same question with the caller's
// credentials. A 200 or a 304 (the apiserver authorizes before it compares
// ETags, and the caller's If-None-Match is kept so an unchanged document
// costs no body) means the caller may read the document, and skewgate
// answers the merged one; any other answer is passed to the caller as the
// apiserver gave it, and false returned.
func (h *Handler) localAllows(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	// While the local server is away a healthy peer judges the caller:
	// the same credentials, the same cluster's authorization.
	ids := []string{h.members.LocalID()}
	if t := h.members.Table(); !t.Local.Healthy {
		ids = append(healthyPeers(t), ids...)
	}
	local := h.members.Backends(ids[:1])
	if len(local) == 0 {
		forward.Unavailable(w, r, "no local apiserver")
		return false
	}
	id := forward.Identity{Anonymous: x.caller.User == nil, Set: h.identity(x.caller, x.marked)}
	if local[0].IsPeer() {
		if !h.reviewToken(w, r, x) {
			return false
		}
		id = h.toPeers(x)
	}
	resp, err := local[0].Send(r, id.Anonymous, id.Set)
	if err != nil {
		h.sendFailed(w, r, x, local[0].ID, err)
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotModified {
		x.tokenAccepted = x.token != "" // taken, or it would have been a 401
		return true
	}
	x.decision = route.Decision{Route: route.Local, Rule: route.RuleNotResource, Servers: []string{local[0].ID}, Reason: "the local apiserver refused the caller"}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set(forward.HeaderRoute, string(route.Local))
	w.Header().Set(forward.HeaderServer, local[0].ID)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return false
}

// serveOpenAPIRoot answers /openapi/v3 with the local root merged with the
// healthy peers', so clients find peer-only group-versions. A peer whose
// root cannot be read or parsed is left out; without the local root there
// is nothing to merge into and the caller gets a 503.
func (h *Handler) serveOpenAPIRoot(w http.ResponseWriter, r *http.Request, x *exchange) {
	body, etag, err := h.openapi.get(r.Context(), h.members.Table(), h.fetchOpenAPIRoot)
	if err != nil {
		unavailable(w, r, x, err.Error())
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache, private")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// healthyPeers lists the peers in routing.
func healthyPeers(t *route.Table) []string {
	var out []string
	for _, p := range t.Peers {
		if p.Healthy && !p.Departed {
			out = append(out, p.ID)
		}
	}
	return out
}

// mergesLocal reports whether the merged view includes the local server's
// document.
func mergesLocal(m *discovery.Merged, localID string) bool {
	return m != nil && slices.Contains(m.Servers(), localID)
}

// unavailable answers 503 with why, to callers skewgate verified; others
// get no addresses or errors of the control plane's inside (the log has
// them).
func unavailable(w http.ResponseWriter, r *http.Request, x *exchange, why string) {
	if x.caller.User == nil {
		slog.Debug("unavailable", "path", r.URL.Path, "why", why)
		why = forward.Unreachable
	}
	forward.Unavailable(w, r, why)
}

// fetchOpenAPIRoot reads the local and every healthy peer's OpenAPI root
// and merges them.
func (h *Handler) fetchOpenAPIRoot(ctx context.Context) ([]byte, error) {
	localDoc, peerDocs, err := h.members.FetchAll(ctx, "/openapi/v3")
	if err != nil {
		return nil, fmt.Errorf("local openapi root: %w", err)
	}
	localRoot, err := discovery.ParseOpenAPIRoot(localDoc)
	if err != nil {
		return nil, fmt.Errorf("local %w", err)
	}
	roots := []*discovery.OpenAPIRoot{localRoot}
	for _, d := range peerDocs {
		if root, err := discovery.ParseOpenAPIRoot(d); err == nil {
			roots = append(roots, root)
		}
	}
	return discovery.MergeOpenAPIRoots(roots...), nil
}

// openAPICache keeps the merged OpenAPI root for a while, per routing
// table: a client asking for it does not make skewgate ask every server.
// A new table (a server joined, left, changed health or discovery) makes
// the next request fetch again; so does openAPITTL, since a server's root
// can change (a CRD) without its aggregated discovery's group/versions.
type openAPICache struct {
	mu    sync.Mutex
	table *route.Table
	at    time.Time
	body  []byte
	etag  string
}

const openAPITTL = 5 * time.Second

func (c *openAPICache) get(ctx context.Context, t *route.Table, fetch func(context.Context) ([]byte, error)) ([]byte, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body != nil && c.table == t && time.Since(c.at) < openAPITTL {
		return c.body, c.etag, nil
	}
	body, err := fetch(ctx)
	if err != nil {
		return nil, "", err
	}
	c.table, c.at, c.body, c.etag = t, time.Now(), body, fmt.Sprintf(`"%X"`, sha256.Sum256(body))
	return c.body, c.etag, nil
}
