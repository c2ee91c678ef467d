// Package proxy is skewgate's client-facing side: it authenticates the
// caller, strips forged identity, classifies and routes each request, and
// forwards it (or answers merged discovery itself). It composes its rooms:
// route (classify and decide), discovery (what each server serves, merged
// views), membership (which servers, how healthy), forward (mTLS to a
// server) and admin (the operator's listener). It never imports the agent;
// the agent reaches it only through the seams cmd/skewgate wires.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/route"
)

// Handler routes and forwards every request.
type Handler struct {
	members    *membership.Members
	classifier *route.Classifier
	auth       *callerAuth
	metrics    *Metrics
	openapi    openAPICache
	tokens     credentialCache
	// stopping ends the long-running requests (watches) when skewgate
	// shuts down (EndLongRunning).
	stopping       context.Context
	EndLongRunning context.CancelFunc
	// handBack, if set, releases steered connections once steering is no
	// longer wanted.
	handBack *HandBack
}

// NewHandler returns the proxy handler. clientCA verifies users' client
// certificates; rh recognises peers.
func NewHandler(members *membership.Members, clientCA dynamiccertificates.CAContentProvider, rh RequestHeader, m *Metrics) *Handler {
	h := &Handler{members: members, classifier: route.NewClassifier(), auth: newCallerAuth(clientCA, rh), metrics: m}
	h.stopping, h.EndLongRunning = context.WithCancel(context.Background())
	return h
}

// exchange is one request on its way through the handler.
type exchange struct {
	req      route.Request
	decision route.Decision
	caller   Caller
	// token is the bearer token the request carries, as an Authorization
	// value (forward.Credential): in Authorization or a websocket bearer
	// subprotocol; tokenErr a bearer subprotocol kube-apiserver refuses.
	// Read once: every decision about a token caller reads these.
	token    string
	tokenErr error
	// end, for a watch, ends its answer cleanly (forward.Request.End).
	end <-chan struct{}
	// marked: the request carries the peer-proxied mark. Every request
	// skewgate sends to a peer carries it (set last, in the round
	// tripper, whoever the caller), and a marked request is always
	// answered locally: so a request crosses at most one skewgate-to-peer
	// hop, anonymous ones too, whose forwarded copies no peer could
	// verify. A client that forges the mark only forces the
	// answer of the server it reached, which it could ask directly.
	marked bool
	// tokenAccepted: an apiserver authenticated the caller's bearer token
	// (see mayKnowRoute).
	tokenAccepted bool
	// reviewed is the user an apiserver's review of the caller's bearer
	// token named, once a request of it goes to a peer (see toPeers).
	reviewed *Caller
	// self: the caller presented skewgate's own front-proxy certificate
	// (its steering probe).
	self bool
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	w, rec := record(w)
	h.handBack.tell(w, r)
	x := &exchange{}
	rec.show = func(code int, server string) bool {
		// The same test says whether the caller proved who it is: its
		// connection counts toward skewgate's bounds from then on.
		show := x.mayKnowRoute(r, code, server)
		if show {
			authenticated(r.Context())
		}
		return show
	}
	h.serve(w, r, x)
	rt, server := rec.route, rec.server
	if rec.code == 0 { // an upgrade, or nothing written
		rt, server = w.Header().Get(forward.HeaderRoute), w.Header().Get(forward.HeaderServer)
	}
	h.observe(x, rec.status(), route.Route(rt), server, time.Since(start))
}

// mayKnowRoute reports whether the caller may see X-Skewgate-Route and
// X-Skewgate-Server on an answer of code from server. They tell which types
// only peers serve, the servers' addresses and that the local apiserver is
// away: kube-apiserver tells a caller it has not authenticated none of that.
// So: a caller skewgate verified (a client certificate, a peer, its own
// probe) sees them; a caller without credentials never does; a token sees
// them once an apiserver accepted it — mayTell or localAllows asked, or an
// apiserver answered the request itself with anything but 401
// (kube-apiserver answers 401 to every request whose token it does not
// accept).
func (x *exchange) mayKnowRoute(r *http.Request, code int, server string) bool {
	switch {
	case x.caller.User != nil || x.caller.Peer || x.self:
		return true
	case x.token == "" || code == http.StatusUnauthorized:
		return false
	case x.tokenAccepted:
		return true
	}
	return server != "" && server != selfServer
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, x *exchange) {
	if !httpguts.ValidHeaderFieldName(r.Method) {
		// Go's HTTP/2 server takes any :method; the outgoing transport
		// would refuse it, and that refusal is nobody's failure to count.
		reject(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid method %q", r.Method)))
		return
	}
	if r.Header.Get(forward.HeaderProbe) != "" && h.auth.isSelf(r) {
		// The agent's steering probe: whether new connections reach
		// skewgate must not depend on the requestheader configuration,
		// nor on the local apiserver's health.
		x.self = true
		forward.AnswerProbe(w)
		return
	}
	x.token, x.tokenErr = forward.Credential(r)
	caller, err := h.auth.authenticate(r, x.hasToken())
	if err != nil {
		// The x509 detail stays in the log: a caller that cannot
		// authenticate learns nothing of the CA, as with kube-apiserver.
		slog.Debug("client certificate rejected", "remote", r.RemoteAddr, "err", err)
		reject(w, r, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	x.caller = caller
	if caller.User != nil || caller.Peer {
		authenticated(r.Context()) // before a long watch's answer begins
	}
	x.marked = r.Header.Get(PeerProxiedHeader) == "true"
	h.auth.stripIdentity(r.Header)
	if !headerListFits(r, h.auth.identityHeaders(caller)) {
		// Refused here, as the apiserver would refuse it: sent on, the
		// transport would refuse it after taking a connection, or a
		// server would end the connection.
		reject(w, r, forward.HeaderTooLarge())
		return
	}

	req, err := h.classifier.Classify(r)
	if err != nil {
		reject(w, r, apierrors.NewBadRequest(err.Error()))
		return
	}
	x.req = req
	if x.caller.Peer && r.Header.Get(forward.HeaderProbe) != "" && req.Kind == route.Other {
		forward.AnswerProbe(w)
		return
	}
	if !x.marked && h.serveMerged(w, r, x) {
		return
	}
	key := "" // only watches stick to a server
	if req.Watch() {
		key = clientKey(r, caller)
	}
	x.decision = route.Decide(req, h.members.Table(), x.marked, key)
	if req.LongRunning() {
		// A watch ends, as a timed-out watch ends, when skewgate shuts
		// down or hands its connection back: its client watches again
		// (through the apiserver once steering is withdrawn) instead of
		// holding the shutdown. Other long-running requests (exec, logs)
		// are cut at shutdown, and so is a watch that did not end.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := cancel
		if req.Watch() {
			x.end = h.watchEnd(ctx, r)
			stop = func() { time.AfterFunc(watchEndGrace, cancel) }
		}
		defer context.AfterFunc(h.stopping, stop)()
		r = r.WithContext(ctx)
	}
	h.dispatch(w, r, x)
}

// reject answers a request skewgate refuses itself, before routing.
func reject(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set(forward.HeaderRoute, string(route.Rejected))
	w.Header().Set(forward.HeaderServer, selfServer)
	forward.Error(w, r, err)
}

// selfServer is X-Skewgate-Server on answers skewgate gives itself.
const selfServer = "skewgate"

func (h *Handler) dispatch(w http.ResponseWriter, r *http.Request, x *exchange) {
	d := x.decision
	switch {
	case d.Route == route.Unavailable:
		if h.mayTell(w, r, x) {
			forward.Unavailable(w, r, d.Reason)
		}
		return
	case d.Absent():
		h.members.RefreshSoon() // maybe a CRD or API nobody listed yet
	}
	if d.Route == route.Peer && !h.reviewToken(w, r, x) {
		return
	}
	// The route header is set by whoever answers (forward: the server that
	// did, local or peer, or skewgate's own refusal), not planned here.
	fr := forward.Request{
		Candidates:  h.members.Backends(d.Servers),
		Idempotent:  x.req.Idempotent(),
		Failed:      h.forwardFailed,
		Anonymous:   x.caller.User == nil,
		SetIdentity: h.identity(x.caller, x.marked),
		ShowErrors:  x.caller.User != nil,
		LongRunning: x.req.LongRunning(),
		End:         x.end,
	}
	if d.Route == route.Peer {
		id := h.toPeers(x)
		fr.Anonymous, fr.SetIdentity = id.Anonymous, id.Set
	}
	fr.Overflow = h.overflow(x)
	t := h.members.Table()
	if d.Listed() && x.req.AsksForType(scopeOf(x.req, t)) {
		gvr := x.req.GVR
		fr.Listed, fr.Stale = true, func(id string) bool { return h.members.DeniedListed(id, gvr) }
	}
	if d.Rule == route.RuleLocal {
		// Made only when the local server failed the request.
		fr.Fallback = func() ([]*forward.Backend, forward.Identity) {
			key := ""
			if x.req.Watch() {
				key = clientKey(r, x.caller)
			}
			peers := h.members.Backends(route.Fallback(x.req, h.members.Table(), key))
			if len(peers) == 0 || !h.reviewedForFallback(r, x) {
				return nil, forward.Identity{}
			}
			return peers, h.toPeers(x)
		}
	}
	forward.Forward(w, r, fr)
}

// watchEndGrace is how long a watch asked to end at shutdown has to end
// cleanly before it is cut.
const watchEndGrace = time.Second

// watchEnd is when a watch's answer is to end cleanly: as skewgate shuts
// down, or when its connection is handed back.
func (h *Handler) watchEnd(ctx context.Context, r *http.Request) <-chan struct{} {
	end := make(chan struct{})
	back := h.handBack.watchEnd(ctx, r)
	go func() {
		select {
		case <-h.stopping.Done():
		case <-back: // nil: never
		case <-ctx.Done():
			return
		}
		close(end)
	}()
	return end
}

// scopeOf is the capabilities that tell the requested type's scope: the
// local server's if it lists the type, else the first peer's that does.
func scopeOf(req route.Request, t *route.Table) route.Capabilities {
	if c := t.Local.Caps; c != nil && c.Serves(req.GVR, req.Subresource) {
		return c
	}
	for _, p := range t.Peers {
		if p.Caps != nil && p.Caps.Serves(req.GVR, req.Subresource) {
			return p.Caps
		}
	}
	return nil
}

func (h *Handler) forwardFailed(id string, kind forward.FailureKind, err error) {
	slog.Debug("forward failed", "server", id, "kind", string(kind), "err", err)
	h.metrics.fwdErrors.WithLabelValues(id, string(kind)).Inc()
	if kind == forward.FailConnect {
		h.members.ConnFailed(id, err)
	}
}

// sendFailed answers a request whose send to server id on the caller's
// behalf failed, and blames the server only as forward.Blame says: a
// caller's request that the transport refused is answered as the apiserver
// would (431, 400), one the caller left is not answered at all.
func (h *Handler) sendFailed(w http.ResponseWriter, r *http.Request, x *exchange, id string, err error) {
	if r.Context().Err() != nil {
		return // the caller left: nobody to answer
	}
	if ce := (*forward.CallerError)(nil); errors.As(err, &ce) {
		forward.RefuseCaller(w, r, ce)
		return
	}
	if kind, ok := forward.Blame(err); ok {
		h.forwardFailed(id, kind, err)
	}
	unavailable(w, r, x, err.Error())
}

// identity returns what forward applies to a request last: whatever
// identity headers are there are replaced with what skewgate verified (a
// user's certificate becomes X-Remote-* headers, a peer's asserted user
// passes on), and the peer-proxied mark is set when mark is: for a verified
// peer's marked request, and for every request skewgate sends to a peer.
func (h *Handler) identity(c Caller, mark bool) func(http.Header) {
	return func(hdr http.Header) { h.auth.setIdentity(hdr, c, mark) }
}

// TrustHeaderNames adds the identity header names kube-apiserver publishes
// to those stripped from every client request.
func (h *Handler) TrustHeaderNames(published HeaderNames) { h.auth.Trust(published) }

// clientKey identifies the client for sticky watches.
func clientKey(r *http.Request, c Caller) string {
	if c.User != nil {
		return "user:" + c.User.GetName()
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return "addr:" + host
}

func (h *Handler) observe(x *exchange, code int, answered route.Route, server string, d time.Duration) {
	group, version, resource := "", "", ""
	t := h.members.Table()
	if x.req.Kind == route.Resource {
		group, version, resource = "unknown", "unknown", "unknown"
		local := t.Local.Caps
		if x.decision.NamesType(local != nil && local.Serves(x.req.GVR, x.req.Subresource)) {
			group, version, resource = x.req.GVR.Group, x.req.GVR.Version, x.req.GVR.Resource
		}
	}
	rt := routeLabel(answered, x.decision.Route)
	rule := string(x.decision.Rule)
	if rule == "" {
		rule = "none" // refused, merged discovery, or skewgate's probe: no routing rule ran
	}
	h.metrics.requests.WithLabelValues(rt, rule, verbLabel(x.req.Verb), group, version, resource, strconv.Itoa(code)).Inc()
	if !x.req.Watch() && code != http.StatusSwitchingProtocols {
		h.metrics.duration.WithLabelValues(rt, serverLabel(server, t)).Observe(d.Seconds())
	}
}

// routeLabel is the route label of an answer: who answered it (the route
// header as sent), or, where nothing was sent (the caller left), what was
// planned; bounded to the routes skewgate names.
func routeLabel(answered, planned route.Route) string {
	switch answered {
	case route.Local, route.Peer, route.Unavailable, route.Merged, route.Rejected, route.Self:
		return string(answered)
	}
	if planned != "" {
		return string(planned)
	}
	return string(route.Rejected)
}

// knownVerbs bound the verb label: a client may send any method, and
// RequestInfoFactory passes an unknown one through as the verb.
var knownVerbs = map[string]bool{
	"get": true, "list": true, "watch": true, "create": true, "update": true, "patch": true,
	"delete": true, "deletecollection": true, "post": true, "put": true, "head": true, "options": true,
}

func verbLabel(verb string) string {
	if knownVerbs[verb] {
		return verb
	}
	return "other"
}

// serverLabel bounds the server label to what skewgate routes to: a
// member (the local server, or a peer — a local request the local server
// failed may be answered by one), or skewgate itself.
func serverLabel(server string, t *route.Table) string {
	if server == t.Local.ID && server != "" {
		return server
	}
	for _, p := range t.Peers {
		if p.ID == server {
			return server
		}
	}
	return selfServer
}
