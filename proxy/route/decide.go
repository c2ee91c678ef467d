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
)

// Capabilities is what one server serves, from its local discovery.
type Capabilities interface {
	Serves(gvr schema.GroupVersionResource, subresource string) bool
	ServesGroupVersion(gv schema.GroupVersion) bool
	ServesGroup(group string) bool
}

// Server is one apiserver as routing sees it at one moment.
type Server struct {
	ID      string
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

// Decision is the outcome for one request.
type Decision struct {
	Route Route
	// Servers are the candidates in order of preference: the local server
	// for Local, capable healthy peers for Peer (a failover walks them),
	// the capable but unreachable ones for Unavailable.
	Servers []string
	Rule    int
	Reason  string
}

// Decide applies the routing contract (DESIGN.md, "Routing rules") to a
// classified request. clientKey identifies the client (its user or
// address) so that its watches stick to one server while the set of
// capable servers is stable. A request that carries the peer-proxied mark
// has marked set and is always local: one hop, never a loop.
func Decide(req Request, t *Table, marked bool, clientKey string) Decision {
	if marked {
		return local(t, 2, "marked as proxied by a peer: answered locally, never proxied twice")
	}
	q := question{req}
	if !q.asks() {
		return local(t, 1, alwaysLocal[req.Kind])
	}
	if t.Local.Caps == nil {
		return local(t, 3, "local discovery not fetched yet: answered locally")
	}
	if q.of(t.Local.Caps) {
		return local(t, 3, "the local server serves it")
	}
	var healthy, down []Server
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
	if len(healthy) > 0 {
		order(healthy, req, clientKey)
		return Decision{Route: Peer, Servers: ids(healthy), Rule: 4,
			Reason: fmt.Sprintf("local server does not serve %s; %d healthy peer(s) do", q.what(), len(healthy))}
	}
	if len(down) > 0 {
		return Decision{Route: Unavailable, Servers: ids(down), Rule: 5,
			Reason: fmt.Sprintf("only unhealthy or departed peers serve %s", q.what())}
	}
	return unservedLocally(q, t)
}

// unservedLocally decides for a request no healthy or unhealthy peer's
// current discovery lists: unavailable while a server may still serve it
// (rule 5), otherwise the local server's genuine 404 (rule 6).
func unservedLocally(q question, t *Table) Decision {
	var unknown, lost []Server
	for _, p := range append([]Server{t.Local}, t.Peers...) {
		switch {
		case p.Lost != nil && q.of(p.Lost):
			lost = append(lost, p)
		case p.Unknown && p.ID != t.Local.ID:
			unknown = append(unknown, p)
		}
	}
	if len(lost) > 0 {
		return Decision{Route: Unavailable, Servers: ids(lost), Rule: 5,
			Reason: fmt.Sprintf("%d server(s) served %s before they restarted on another version, within the grace", len(lost), q.what())}
	}
	if len(unknown) > 0 {
		return Decision{Route: Unavailable, Servers: ids(unknown), Rule: 5,
			Reason: fmt.Sprintf("local server does not serve %s and what %d peer(s) serve is not known yet", q.what(), len(unknown))}
	}
	return local(t, 6, "no server serves "+q.what()+": the local server's 404 is genuine")
}

// alwaysLocal are rule 1's reasons, by kind.
var alwaysLocal = func() map[Kind]string {
	m := map[Kind]string{}
	for k := range kindNames {
		m[Kind(k)] = Kind(k).String() + " request: answered locally"
	}
	return m
}()

func local(t *Table, rule int, reason string) Decision {
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
