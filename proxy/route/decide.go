package route

import (
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Route is where a request goes; its string is the X-Skewgate-Route value
// and the metrics label.
type Route string

const (
	Local       Route = "local"
	Peer        Route = "peer"
	Unavailable Route = "unavailable"
	// Merged is peer-aggregated discovery answered by skewgate itself.
	Merged Route = "merged"
	// Rejected is a request skewgate refused before routing (an untrusted
	// client certificate, an unparseable path).
	Rejected Route = "rejected"
	// Self is skewgate's answer to its own steering probe.
	Self Route = "self"
)

// Capabilities is what one server serves, from its local discovery.
type Capabilities interface {
	Serves(gvr schema.GroupVersionResource, subresource string) bool
	ServesGroupVersion(gv schema.GroupVersion) bool
	ServesGroup(group string) bool
	// Namespaced reports the resource's scope, and whether it is served.
	Namespaced(gvr schema.GroupVersionResource) (namespaced, ok bool)
	// Resources lists the resources and "resource/subresource"s the
	// server's document for gv lists, sorted. Shared: do not modify.
	Resources(gv schema.GroupVersion) []string
}

// Server is one apiserver as routing sees it at one moment.
type Server struct {
	ID string
	// Healthy: its /readyz probes pass and its connections work. For the
	// local server it also means back in routing: its discovery was read
	// again since it returned, and it is not flapping (see rule 3a).
	Healthy bool
	// Latency is the recent round trip to the server; peers with less are
	// preferred.
	Latency time.Duration
	// Caps is nil until the server's discovery was first fetched.
	Caps Capabilities
	// Departed marks a server that left membership within the grace
	// window: it is never routed to, but what it served is still
	// "temporarily unavailable", not absent.
	Departed bool
	// Unknown marks a member whose discovery is not known to be current,
	// within the grace window: never read (unreachable since skewgate
	// started or since it joined), or not re-read since it went down (it
	// may come back on another version, as in a rolling upgrade). It may
	// serve anything, so what the local server does not serve is
	// unavailable, not absent, until it is known.
	Unknown bool
	// Lost is what the server served before it restarted on another
	// version, within the grace window (nil: nothing): during a rollback
	// a resource type the last new server took away is temporarily
	// unavailable, not absent.
	Lost Capabilities
}

// Table is the snapshot routing decides on.
type Table struct {
	Local Server
	Peers []Server
	// Served is what some member served within the grace (nil: nothing
	// known): departed and away servers' documents, and what servers
	// served before they came back serving less. A peer not known yet
	// holds only these types under rule 5; any other type nobody serves
	// now is absent at once — a CRD-presence probe must hear its 404.
	Served Capabilities
	// BuiltIn are the groups kube-apiserver serves itself (nil: never
	// read from the cluster; the compiled fallback decides).
	BuiltIn BuiltInGroups
	// localIDs is []string{Local.ID}, made once by SetLocal so that a
	// local decision allocates nothing.
	localIDs []string
}

// SetLocal sets the local server of a table being built.
func (t *Table) SetLocal(s Server) {
	t.Local, t.localIDs = s, []string{s.ID}
}

// localServers is the candidate list of a local decision. Callers only
// read Decision.Servers, so the table's own slice is shared.
func (t *Table) localServers() []string {
	if len(t.localIDs) == 1 && t.localIDs[0] == t.Local.ID {
		return t.localIDs
	}
	return []string{t.Local.ID}
}

// Rule names a row of the routing contract (docs/routing.md).
type Rule string

const (
	RuleNotResource Rule = "1"  // health, version, metrics, merged discovery: the local server's own
	RuleMarked      Rule = "2"  // a peer's forwarded request: answered locally
	RuleLocal       Rule = "3"  // the local server serves it and is in routing
	RuleLocalAway   Rule = "3a" // the local server serves it but is away: capable peers
	RulePeer        Rule = "4"  // healthy peers serve it
	RuleUnavailable Rule = "5"  // only servers that cannot answer now serve it: 503
	RuleNobody      Rule = "6"  // nobody serves it: the local server's genuine 404
)

// Decision is the outcome for one request.
type Decision struct {
	Route Route
	// Servers are the candidates in order of preference: the local server
	// for Local, capable healthy peers for Peer (a failover walks them),
	// the capable but unreachable ones for Unavailable.
	Servers []string
	Rule    Rule
	Reason  string
}

// Listed reports whether the servers were chosen because their discovery
// lists the requested type (rules 3, 3a and 4): a "type not found" 404
// from one of them means its discovery is out of date, not that the type
// is absent.
func (d Decision) Listed() bool {
	return d.Rule == RuleLocal || d.Rule == RuleLocalAway || d.Rule == RulePeer
}

// Absent reports whether no server was found serving the request (rule
// 6): perhaps a type appeared (a CRD) that no discovery read yet lists.
func (d Decision) Absent() bool { return d.Rule == RuleNobody }

// NamesType reports whether the decision names a type some server's
// discovery lists, so the request's GVR may label a metric: bounded by
// discovery, never by what clients send. localServes says whether the
// local server lists it.
func (d Decision) NamesType(localServes bool) bool {
	switch d.Rule {
	case RuleLocalAway, RulePeer, RuleUnavailable:
		return true
	case RuleLocal, RuleMarked:
		return localServes
	}
	return false
}

// Decide applies the routing contract (docs/routing.md, "Per request, in order") to a
// classified request. clientKey identifies the client (its user or
// address) so that its watches stick to one server while the set of
// capable servers is stable. A request that carries the peer-proxied mark
// has marked set and is always local: one hop, never a loop.
func Decide(req Request, t *Table, marked bool, clientKey string) Decision {
	if marked {
		return local(t, RuleMarked, "marked as proxied by a peer: answered locally, never proxied twice")
	}
	q := question{req}
	if !q.asks() {
		return local(t, RuleNotResource, alwaysLocal[req.Kind])
	}
	if !t.Local.Healthy && (t.Local.Caps == nil || q.of(t.Local.Caps)) {
		return localAway(q, t, clientKey)
	}
	if t.Local.Caps == nil {
		return local(t, RuleLocal, "local discovery not fetched yet: answered locally")
	}
	if q.of(t.Local.Caps) {
		if d, ok := fullerDocument(q, t, clientKey); ok {
			return d
		}
		return local(t, RuleLocal, "the local server serves it")
	}
	healthy, down := capablePeers(q, t)
	if len(healthy) > 0 {
		order(healthy, req, clientKey)
		return Decision{Route: Peer, Servers: ids(healthy), Rule: RulePeer,
			Reason: fmt.Sprintf("local server does not serve %s; %d healthy peer(s) do", q.what(), len(healthy))}
	}
	if len(down) > 0 {
		return Decision{Route: Unavailable, Servers: ids(down), Rule: RuleUnavailable,
			Reason: fmt.Sprintf("only unhealthy or departed peers serve %s", q.what())}
	}
	return unservedLocally(q, t)
}

// capablePeers splits the peers whose discovery lists what q asks into
// those routing may use and those it may not (down or departed).
func capablePeers(q question, t *Table) (healthy, down []Server) {
	for _, p := range t.Peers {
		if p.Caps == nil || !q.of(p.Caps) {
			continue
		}
		if p.Healthy && !p.Departed {
			healthy = append(healthy, p)
		} else {
			down = append(down, p)
		}
	}
	return healthy, down
}

// localAway decides for a request the local server would answer while it
// is away (draining, down, starting, or back but not yet confirmed): the
// healthy peers that serve it take it, reads and writes alike, since
// nothing was sent to the local server. With none, the local server is
// still tried: a draining server may yet answer, and a dead one gets the
// caller a 503 from the forwarder, never a peer's stand-in answer.
func localAway(q question, t *Table, clientKey string) Decision {
	healthy, _ := capablePeers(q, t)
	if len(healthy) == 0 {
		return local(t, RuleLocalAway, "the local server is away and no healthy peer serves "+q.what()+": tried locally")
	}
	order(healthy, q.req, clientKey)
	return Decision{Route: Peer, Servers: ids(healthy), Rule: RuleLocalAway,
		Reason: fmt.Sprintf("the local server is away; %d healthy peer(s) serve %s", len(healthy), q.what())}
}

// Fallback lists, for a request routed to the local server, the healthy
// peers that serve it too, in order of preference: where an idempotent
// request goes when the local server fails it before answering.
func Fallback(req Request, t *Table, clientKey string) []string {
	q := question{req}
	if !q.asks() {
		return nil
	}
	healthy, _ := capablePeers(q, t)
	order(healthy, req, clientKey)
	return ids(healthy)
}

// fullerDocument sends a request for one group-version's document
// (/apis/<g>/<v>, /openapi/v3/apis/<g>/<v>) that the local server serves
// to a healthy peer whose document lists everything any healthy server's
// lists for it, when the local one lacks something: the merged /apis
// lists a type a peer added to a shared group-version, and clients that
// read the per-group-version document must find it there too.
func fullerDocument(q question, t *Table, clientKey string) (Decision, bool) {
	if q.req.Kind == Resource || q.req.GV.Version == "" {
		return Decision{}, false
	}
	own := t.Local.Caps.Resources(q.req.GV)
	healthy, _ := capablePeers(q, t)
	var adding, complete []Server
	for _, p := range healthy {
		if !covers(own, p.Caps.Resources(q.req.GV)) {
			adding = append(adding, p)
		}
	}
	if len(adding) == 0 {
		return Decision{}, false
	}
	// Prefer peers whose document lists all the others list too; with
	// none (each adds something different), any that adds.
	for _, p := range adding {
		all := true
		for _, o := range adding {
			all = all && covers(p.Caps.Resources(q.req.GV), o.Caps.Resources(q.req.GV))
		}
		if all && covers(p.Caps.Resources(q.req.GV), own) {
			complete = append(complete, p)
		}
	}
	if len(complete) > 0 {
		adding = complete
	}
	order(adding, q.req, clientKey)
	return Decision{Route: Peer, Servers: ids(adding), Rule: RulePeer,
		Reason: fmt.Sprintf("%d healthy peer(s) list resources of %s that the local server does not", len(adding), q.what())}, true
}

// covers reports whether sorted list a contains every element of sorted b.
func covers(a, b []string) bool {
	i := 0
	for _, x := range b {
		for i < len(a) && a[i] < x {
			i++
		}
		if i == len(a) || a[i] != x {
			return false
		}
	}
	return true
}

// unservedLocally decides for a request no healthy or unhealthy peer's
// current discovery lists: unavailable while a server may still serve it
// (rule 5: it served it before it came back serving less, or a peer not
// known yet may — for a type some member served within the grace, any
// built-in type (a new release's), or any type while a peer was never read
// at all), otherwise the local server's genuine 404 (rule 6).
func unservedLocally(q question, t *Table) Decision {
	var unknown, lost []Server
	servedRecently := t.Served != nil && q.of(t.Served)
	newInRelease := t.BuiltIn.BuiltIn(q.group())
	for _, p := range append([]Server{t.Local}, t.Peers...) {
		switch {
		case p.Lost != nil && q.of(p.Lost):
			lost = append(lost, p)
		case p.Unknown && p.ID != t.Local.ID && (servedRecently || p.Caps == nil || newInRelease):
			// A peer not known yet may have come back on another version
			// (skewgate's probes see its return a second or two after
			// clients do), serving built-in types no member served
			// before: those are the upgrade's new types. A peer never
			// read at all may serve anything. But a CRD or aggregated
			// group nobody served is absent: every server would list it
			// (a CRD-presence probe must hear its 404).
			unknown = append(unknown, p)
		}
	}
	if len(lost) > 0 {
		return Decision{Route: Unavailable, Servers: ids(lost), Rule: RuleUnavailable,
			Reason: fmt.Sprintf("%d server(s) served %s before they restarted on another version, within the rollback grace or its discovery settle", len(lost), q.what())}
	}
	if len(unknown) > 0 {
		return Decision{Route: Unavailable, Servers: ids(unknown), Rule: RuleUnavailable,
			Reason: fmt.Sprintf("local server does not serve %s, and %d peer(s) not known yet may (back on another version, or serving it within the grace)", q.what(), len(unknown))}
	}
	return local(t, RuleNobody, "no server serves "+q.what()+": the local server's 404 is genuine")
}

// alwaysLocal are rule 1's reasons, by kind.
var alwaysLocal = func() map[Kind]string {
	m := map[Kind]string{}
	for k := range kindNames {
		m[Kind(k)] = Kind(k).String() + " request: answered locally"
	}
	return m
}()

func local(t *Table, rule Rule, reason string) Decision {
	return Decision{Route: Local, Servers: t.localServers(), Rule: rule, Reason: reason}
}

// question is what to ask of each server's capabilities for a request. It
// is a value, not a closure, so that asking allocates nothing.
type question struct{ req Request }

// asks reports whether routing depends on capabilities at all; requests
// that do not are always local.
func (q question) asks() bool {
	switch q.req.Kind {
	case Resource, DiscoveryGroup, OpenAPIGroupVersion:
		return true
	}
	return false
}

func (q question) of(c Capabilities) bool {
	switch {
	case q.req.Kind == Resource:
		return c.Serves(q.req.GVR, q.req.Subresource)
	case q.req.GV.Version == "":
		return c.ServesGroup(q.req.GV.Group)
	}
	return c.ServesGroupVersion(q.req.GV)
}

// group is the API group the request asks about.
func (q question) group() string {
	if q.req.Kind == Resource {
		return q.req.GVR.Group
	}
	return q.req.GV.Group
}

// what names what the request asks about, for reasons.
func (q question) what() string {
	switch {
	case q.req.Kind == Resource:
		gvr := q.req.GVR
		what := gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
		if q.req.Subresource != "" {
			what += "/" + q.req.Subresource
		}
		return what
	case q.req.GV.Version == "":
		return "group " + q.req.GV.Group
	}
	return q.req.GV.String()
}

// order sorts capable peers by latency, or for a watch by a rendezvous hash
// of the client, so one client's watches keep landing on the same server
// while the capable set does not change.
func order(peers []Server, req Request, clientKey string) {
	if req.Watch() {
		sort.SliceStable(peers, func(i, j int) bool {
			return weight(clientKey, peers[i].ID) > weight(clientKey, peers[j].ID)
		})
		return
	}
	sort.SliceStable(peers, func(i, j int) bool {
		if peers[i].Latency != peers[j].Latency {
			return peers[i].Latency < peers[j].Latency
		}
		return peers[i].ID < peers[j].ID
	})
}

func weight(client, server string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(client))
	h.Write([]byte{0})
	h.Write([]byte(server))
	return h.Sum64()
}

func ids(servers []Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.ID
	}
	return out
}
