package membership

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

// The rollback grace is how long what a server served outlives its
// serving it: a server that departed, came back serving less (a rollback),
// or went down and is not re-read yet still counts, for rule 5, as one
// that may serve its types again — 503 with Retry-After, not 404. Each
// grace has a start (the departure, the return, the down) saved in the
// state file; its end is derived from the start, Config.Grace and the
// cluster's override, so a restart of skewgate neither ends nor extends
// it, and the operator's override moves every node's end at once.

// DefaultGrace is Config.Grace's default; docs/routing.md says why.
const DefaultGrace = 5 * time.Minute

// NoGrace as Config.Grace disables the grace: what a server no longer
// serves is absent at once (unless the cluster's override holds it).
const NoGrace time.Duration = -1

// MaxGraceOverride bounds the cluster's override: it ends a grace at most
// this long after the grace began. Whoever may write the switch can hold
// types at 503 on every node — a day covers a rollback that is being
// worked on; a value left a year ahead must not hold a type for a year.
// The start is the grace's own, kept in the state file, so a restart
// neither lengthens nor shortens the bound.
const MaxGraceOverride = 24 * time.Hour

// SetGraceUntil sets the cluster's override (kube-system/skewgate, key
// rollback-grace-until): every grace that began at or before until ends at
// until, sooner or later than its own end, but no later than
// MaxGraceOverride after it began; one that begins after until is the
// flag's. Zero removes the override.
func (m *Members) SetGraceUntil(until time.Time) {
	prev := m.graceUntil.Load()
	switch {
	case until.IsZero() && prev == nil:
		return
	case until.IsZero():
		m.graceUntil.Store(nil)
	case prev != nil && prev.Equal(until):
		return
	default:
		m.graceUntil.Store(&until)
	}
	m.cfg.Log.Info("rollback grace override changed", "until", until, "set", !until.IsZero())
	m.forgetDeparted(m.now())
	m.publish()
}

// GraceUntil is the cluster's override, if set.
func (m *Members) GraceUntil() (time.Time, bool) {
	if u := m.graceUntil.Load(); u != nil {
		return *u, true
	}
	return time.Time{}, false
}

// override is when the cluster's override ends a grace that began at
// start, bounded by MaxGraceOverride; false when it does not apply.
func (m *Members) override(start time.Time) (time.Time, bool) {
	u := m.graceUntil.Load()
	if u == nil || start.After(*u) {
		return time.Time{}, false
	}
	if bound := start.Add(MaxGraceOverride); u.After(bound) {
		return bound, true
	}
	return *u, true
}

// graceEnd is when a grace that began at start ends.
func (m *Members) graceEnd(start time.Time) time.Time {
	if u, ok := m.override(start); ok {
		return u
	}
	return start.Add(max(m.cfg.Grace, 0))
}

// inGrace reports whether a grace that began at start holds at now:
// merged discovery lists what it holds (Stale).
func (m *Members) inGrace(start, now time.Time) bool {
	return !start.IsZero() && now.Before(m.graceEnd(start))
}

// DiscoverySettle is how long rule 5 still answers 503, after a grace
// ended, for what it held: merged discovery stops listing a type when its
// grace ends, and a client acts on discovery it read up to a refresh ago.
// kube-controller-manager's garbage collector re-reads discovery every
// 30 s; until then it still maps the type, and a 404 for an owner of it
// reads as "the owner is gone": its dependents are deleted. Seen in the
// 1.36 → 1.37 kubeadm drill (docs/routing.md, "The rollback grace").
const DiscoverySettle = time.Minute

// holdEnd is when rule 5 stops holding what a grace that began at start
// held: its end plus DiscoverySettle. No grace (--rollback-grace=0, no
// override) holds nothing: absent at once means at once.
func (m *Members) holdEnd(start time.Time) time.Time {
	if u, ok := m.override(start); ok {
		return u.Add(DiscoverySettle)
	}
	if m.cfg.Grace <= 0 {
		return start
	}
	return start.Add(m.cfg.Grace + DiscoverySettle)
}

// inHold reports whether rule 5 holds at now what a grace that began at
// start held: within the grace or its settle.
func (m *Members) inHold(start, now time.Time) bool {
	return !start.IsZero() && now.Before(m.holdEnd(start))
}

// anyOf serves what any of its capabilities serves: the types some member
// served within the grace (route.Table.Served).
type anyOf []route.Capabilities

func (a anyOf) Serves(gvr schema.GroupVersionResource, sub string) bool {
	return slices.ContainsFunc(a, func(c route.Capabilities) bool { return c.Serves(gvr, sub) })
}

func (a anyOf) ServesGroupVersion(gv schema.GroupVersion) bool {
	return slices.ContainsFunc(a, func(c route.Capabilities) bool { return c.ServesGroupVersion(gv) })
}

func (a anyOf) ServesGroup(group string) bool {
	return slices.ContainsFunc(a, func(c route.Capabilities) bool { return c.ServesGroup(group) })
}

func (a anyOf) Namespaced(gvr schema.GroupVersionResource) (bool, bool) {
	for _, c := range a {
		if ns, ok := c.Namespaced(gvr); ok {
			return ns, true
		}
	}
	return false, false
}

func (a anyOf) Resources(gv schema.GroupVersion) []string {
	var out []string
	for _, c := range a {
		out = append(out, c.Resources(gv)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// GraceType is a resource type answered 503 by rule 5 only because a
// grace holds: for people (skewgate routes) and the grace metric.
type GraceType struct {
	GVR schema.GroupVersionResource `json:"gvr"`
	// Since is when its grace began (the earliest of its servers'), and
	// Until when rule 5's 503 for it ends, as things stand (the latest of
	// its servers'). Merged discovery lists it until Listed, one
	// DiscoverySettle earlier: clients drop it before it is absent.
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Listed time.Time `json:"listed"`
	// Servers served it; Why says how each stopped.
	Servers []string `json:"servers"`
	Why     []string `json:"why"`
}

// graceSource is one server's types held by a grace.
type graceSource struct {
	id, why       string
	caps          *discovery.Capabilities
	since         time.Time
	until, listed time.Time
}

func (m *Members) graceSource(id, why string, caps *discovery.Capabilities, since time.Time) graceSource {
	return graceSource{id, why, caps, since, m.holdEnd(since), m.graceEnd(since)}
}

// InGrace lists, sorted, the resource types that rule 5 answers with 503
// now because a grace, or its settle, holds them: types a departed server, a server back
// serving less, or one down and not re-read served, which no server in
// routing serves. Bounded by discovery: nothing a client sent names them.
func (m *Members) InGrace() []GraceType {
	// Judged as of the published table, not the clock: what `skewgate
	// routes` lists as held is what routing answers 503 for, also in the
	// instant between an edge and Run's rebuild.
	now, snap, t := time.Unix(0, m.tableAt.Load()), m.Discovery(), m.Table()
	var sources []graceSource
	m.mu.Lock()
	for id, s := range m.servers {
		st, d := s.status(), s.doubt()
		switch {
		case st.Departed != nil && m.inHold(*st.Departed, now):
			sources = append(sources, m.graceSource(id, "departed", snap.Capabilities(id), *st.Departed))
		case d.lost != nil && m.inHold(d.lostSince, now):
			sources = append(sources, m.graceSource(id, "came back serving less", d.lost, d.lostSince))
		case d.unconfirmed && d.preDown != nil && m.inHold(d.downSince, now):
			sources = append(sources, m.graceSource(id, "down, not re-read since", d.preDown, d.downSince))
		}
	}
	m.mu.Unlock()
	slices.SortFunc(sources, func(a, b graceSource) int { return strings.Compare(a.id, b.id) })
	byGVR := map[schema.GroupVersionResource]*GraceType{}
	for _, src := range sources {
		for _, gv := range src.caps.GroupVersions() {
			for _, r := range src.caps.Resources(gv) {
				if strings.Contains(r, "/") {
					continue // a subresource follows its resource
				}
				gvr := gv.WithResource(r)
				g, ok := byGVR[gvr]
				if !ok {
					if d := route.Decide(route.Request{Kind: route.Resource, Verb: "list", GVR: gvr}, t, false, ""); d.Rule != route.RuleUnavailable {
						continue
					}
					g = &GraceType{GVR: gvr}
					byGVR[gvr] = g
				}
				g.Servers, g.Why = append(g.Servers, src.id), append(g.Why, src.why)
				if src.until.After(g.Until) {
					g.Until = src.until
				}
				if src.listed.After(g.Listed) {
					g.Listed = src.listed
				}
				if g.Since.IsZero() || src.since.Before(g.Since) {
					g.Since = src.since
				}
			}
		}
	}
	out := make([]GraceType, 0, len(byGVR))
	for _, g := range byGVR {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b GraceType) int { return strings.Compare(a.GVR.String(), b.GVR.String()) })
	return out
}

// Held says why a rollback grace or its settle holds a type now, or ""
// when none does: while it holds, a client handed back to the local
// apiserver would get its 404 for a type merged discovery listed a
// moment ago, so steering's off waits and the kernel's hold keeps a dead
// skewgate's connections refused (agent.NodeConfig.Held).
func (m *Members) Held() string {
	held := m.InGrace()
	if len(held) == 0 {
		return ""
	}
	var until time.Time
	for _, g := range held {
		if g.Until.After(until) {
			until = g.Until
		}
	}
	what := held[0].GVR.String()
	if len(held) > 1 {
		what = fmt.Sprintf("%d types (%s, …)", len(held), what)
	}
	return fmt.Sprintf("a rollback grace or its settle holds %s until %s; end the grace first (kube-system/skewgate rollback-grace-until), its settle follows",
		what, until.UTC().Format(time.RFC3339))
}
