package membership

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

// Window is the skew window: open while an upgrade or a rollback is under
// way — the members' versions differ, what their binaries serve differs
// (for longer than the debounce), or a node's apiserver upgrade has begun
// (the upgrade signal) — and for the hold time after, or longer while a
// rollback grace that began within the window holds a type: rule 5
// answers 503 for it through skewgate, and a client handed back to a
// server directly would get that server's 404. Steering mode auto steers
// only while it is open.
//
// A member that is away, slow, unknown, unreachable from this node or
// gone is not an upgrade: rule 3a serves its node's clients without a
// window, and opening one for every readyz blip, certificate-renewal
// restart or partition would move every client of every node onto the hop
// for the hold time. Nor are CRDs or APIService-backed groups: every
// server serves them from the same etcd and the same aggregator
// configuration, and each server's discovery learns of a change at its
// own instant.
type Window struct {
	Open bool
	// Reason says which members differ (or differed, within the hold).
	Reason string
	// Until is when the window closes if they keep agreeing; zero while
	// they differ.
	Until time.Time
	// Since is when the open window opened; zero while closed.
	Since time.Time
	// Causes say what keeps it open, from WindowCauses: bounded, unlike
	// Reason, so that a metric can carry them.
	Causes []string
}

// What keeps a window open (Window.Causes, the cause label of
// skewgate_skew_window_cause): an upgrade signal, the members' versions,
// their built-in types, the hold time after the last of those, or a
// rollback grace that outlasts the hold.
const (
	CauseUpgradeSignal = "upgrade_signal"
	CauseVersions      = "versions"
	CauseBuiltInTypes  = "built_in_types"
	CauseHold          = "hold"
	CauseGrace         = "grace"
)

// WindowCauses are every cause, in the order a metric exports them.
var WindowCauses = []string{CauseUpgradeSignal, CauseVersions, CauseBuiltInTypes, CauseHold, CauseGrace}

// skew is what one published table says about an upgrade.
type skew struct {
	// versions names the members' differing versions; a version is read
	// from the running binary, so it never differs for a routine reason.
	versions string
	// serves names a built-in resource some members list and others do
	// not; it counts once it has lasted the debounce, because a server
	// that just started may list its groups in more than one read.
	serves string
}

// skewWatch remembers the skew seen, for the window.
type skewWatch struct {
	mu          sync.Mutex
	cur         skew
	servesSince time.Time // when cur.serves began
	reason      string    // why the window is (or was last) open
	last        time.Time // when a counted difference was last seen
	since       time.Time // when the window last opened; zero while closed
	open        bool      // the window as last reported, for logging changes
	ready       bool      // the members were ready once: skew counts from then
}

// windowRules are the window's durations, and the rollback graces that
// hold types now.
type windowRules struct {
	hold, debounce time.Duration
	graces         []GraceType
}

// heldBy is when the last grace among r's that began by begun ends; zero
// if none.
func (r windowRules) heldBy(begun time.Time) time.Time {
	var out time.Time
	for _, g := range r.graces {
		if !g.Since.After(begun) && g.Until.After(out) {
			out = g.Until
		}
	}
	return out
}

// note records the skew a publish saw at now.
func (w *skewWatch) note(s skew, now time.Time) {
	if s.serves != "" && w.cur.serves == "" {
		w.servesSince = now
	}
	w.cur = s
}

// at is the window at now, given the upgrade signal's reason ("" when
// off). It records a counted difference as seen at now.
func (w *skewWatch) at(now time.Time, r windowRules, signal string) Window {
	out := w.window(now, r, signal)
	switch {
	case !out.Open:
		w.since = time.Time{}
	case w.since.IsZero():
		w.since = now
	}
	out.Since = w.since
	return out
}

// window is at's window, without when it opened.
func (w *skewWatch) window(now time.Time, r windowRules, signal string) Window {
	var why, causes []string
	if signal != "" {
		why, causes = append(why, signal), append(causes, CauseUpgradeSignal)
	}
	if w.cur.versions != "" {
		why, causes = append(why, w.cur.versions), append(causes, CauseVersions)
	}
	if w.cur.serves != "" && now.Sub(w.servesSince) >= r.debounce {
		why, causes = append(why, w.cur.serves), append(causes, CauseBuiltInTypes)
	}
	if len(why) > 0 {
		w.reason, w.last = strings.Join(why, "; "), now
		return Window{Open: true, Reason: w.reason, Causes: causes}
	}
	if w.last.IsZero() {
		return Window{Reason: w.reason}
	}
	until, cause := w.last.Add(r.hold), CauseHold
	if g := r.heldBy(until); g.After(until) {
		until, cause = g, CauseGrace
	}
	if now.Before(until) {
		return Window{Open: true, Reason: w.reason, Until: until, Causes: []string{cause}}
	}
	return Window{Reason: w.reason}
}

// Window returns the skew window now.
func (m *Members) Window() Window {
	signal := ""
	if m.cfg.UpgradeSignal != nil {
		if on, why := m.cfg.UpgradeSignal(); on {
			signal = "upgrade under way: " + why
		}
	}
	// Before w.mu: InGrace takes m.mu, which publish holds before it
	// notes the skew.
	graces := m.InGrace()
	w := &m.skew
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.at(time.Now(), windowRules{hold: m.cfg.WindowHold, debounce: m.cfg.WindowDebounce, graces: graces}, signal)
	if out.Open != w.open {
		w.open = out.Open
		if out.Open {
			m.cfg.Log.Info("skew window opened", "reason", out.Reason)
		} else {
			m.cfg.Log.Info("skew window closed: no upgrade for the hold time, and no rollback grace from it holds a type", "hold", m.cfg.WindowHold, "last", w.reason)
		}
	}
	return out
}

// noteSkew records what the table just published says about skew.
func (m *Members) noteSkew(s skew, now time.Time) {
	w := &m.skew
	if !w.ready {
		// Before every member was probed and read, versions and
		// capabilities are partly unknown: no skew counts yet.
		if m.Ready() != nil {
			return
		}
		w.ready = true
	}
	w.mu.Lock()
	w.note(s, now)
	w.mu.Unlock()
	m.Window() // logs a change at once
}

// skewOf says how the members differ, if they do: in the versions of the
// members not departed, and in the built-in resources of those whose
// discovery is known.
func skewOf(t *route.Table, statuses map[string]Status) skew {
	servers := append([]route.Server{t.Local}, t.Peers...)
	versions := map[string][]string{}
	for _, s := range servers {
		if v := statuses[s.ID].Version; v != "" && !s.Departed {
			versions[v] = append(versions[v], s.ID)
		}
	}
	var out skew
	if len(versions) > 1 {
		var vs []string
		for v, ids := range versions {
			slices.Sort(ids)
			vs = append(vs, v+" on "+strings.Join(ids, ","))
		}
		slices.Sort(vs)
		out.versions = "versions differ: " + strings.Join(vs, "; ")
	}
	out.serves = servesDiffer(servers, t.BuiltIn)
	return out
}

// servesDiffer names one built-in resource some members list and others
// do not, or "".
func servesDiffer(servers []route.Server, builtIn route.BuiltInGroups) string {
	var known []route.Server
	for _, s := range servers {
		if s.Caps != nil && !s.Departed {
			known = append(known, s)
		}
	}
	slices.SortFunc(known, func(a, b route.Server) int { return strings.Compare(a.ID, b.ID) })
	for i, a := range known {
		for _, b := range known[i+1:] {
			if what := firstMissing(a.Caps, b.Caps, builtIn); what != "" {
				return fmt.Sprintf("built-in types differ: %s lists %s, %s does not", a.ID, what, b.ID)
			}
			if what := firstMissing(b.Caps, a.Caps, builtIn); what != "" {
				return fmt.Sprintf("built-in types differ: %s lists %s, %s does not", b.ID, what, a.ID)
			}
		}
	}
	return ""
}

// firstMissing is a built-in group/version/resource a lists and b does
// not, or "".
func firstMissing(a, b route.Capabilities, builtIn route.BuiltInGroups) string {
	ca, ok := a.(*discovery.Capabilities)
	if !ok {
		return ""
	}
	for _, gv := range ca.GroupVersions() {
		if !builtIn.BuiltIn(gv.Group) {
			continue
		}
		theirs := b.Resources(gv)
		for _, r := range a.Resources(gv) {
			if _, found := slices.BinarySearch(theirs, r); !found {
				return gv.String() + "/" + r
			}
		}
	}
	return ""
}

// LocalAway says why the local apiserver is out of routing (down,
// draining, starting, or settling after it flapped) while a healthy peer
// can take its node's requests, or "". It is no window: its node's clients
// are steered to peers only while it lasts (rule 3a), then handed back.
// With no healthy peer (etcd stalled, every /readyz failing at once)
// skewgate could only pass requests to the same servers: it stays out of
// the path. Both are judged at one instant: a peer counts only once one
// of its probes passed after the local server went down, since each
// server's probes run on their own phase (in a stall of every server the
// local one can fail first while the peer, not probed again yet, still
// looks healthy).
func (m *Members) LocalAway() string {
	if m.Ready() != nil {
		return ""
	}
	t := m.Table()
	if t == nil || t.Local.Healthy {
		return ""
	}
	m.mu.Lock()
	local := m.servers[m.localID]
	peers := make([]*server, 0, len(m.servers))
	for id, s := range m.servers {
		if id != m.localID {
			peers = append(peers, s)
		}
	}
	m.mu.Unlock()
	since := local.down()
	if !slices.ContainsFunc(peers, func(p *server) bool { return p.healthySince(since) }) {
		return ""
	}
	return "the local apiserver " + t.Local.ID + " is away"
}
