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

// Window is the skew window: open from the moment the members differ —
// in version, in what they serve, or because one is away, unknown, gone
// within the grace or back serving less — until they have agreed for the
// hold time. Steering mode auto steers only while it is open.
type Window struct {
	Open bool
	// Reason says which members differ (or differed, within the hold).
	Reason string
	// Until is when the window closes if they keep agreeing; zero while
	// they differ.
	Until time.Time
}

// skewWatch remembers the last skew seen.
type skewWatch struct {
	mu     sync.Mutex
	now    bool      // the members differ at the last publish
	reason string    // why, then or last
	last   time.Time // when they last differed
	open   bool      // the window as last reported, for logging changes
	ready  bool      // the members were ready once: skew counts from then
}

// Window returns the skew window now.
func (m *Members) Window() Window {
	w := &m.skew
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	out := Window{Reason: w.reason}
	switch {
	case w.now:
		out.Open = true
	case !w.last.IsZero() && now.Before(w.last.Add(m.cfg.WindowHold)):
		out.Open, out.Until = true, w.last.Add(m.cfg.WindowHold)
	}
	if out.Open != w.open {
		w.open = out.Open
		if out.Open {
			m.cfg.Log.Info("skew window opened", "reason", out.Reason)
		} else {
			m.cfg.Log.Info("skew window closed: the apiservers agreed for the hold time", "hold", m.cfg.WindowHold, "last", w.reason)
		}
	}
	return out
}

// noteSkew records what the table just published says about skew.
func (m *Members) noteSkew(reason string, now time.Time) {
	w := &m.skew
	if !w.ready {
		// Before every member was probed and read, everything is
		// "unknown": that is no skew, and must not hold a window open
		// after every start of skewgate. (Steering waits for Ready.)
		if m.Ready() != nil {
			return
		}
		w.ready = true
	}
	w.mu.Lock()
	w.now = reason != ""
	if w.now {
		w.reason, w.last = reason, now
	}
	w.mu.Unlock()
	m.Window() // logs a change at once
}

// skewOf says why the members differ, or "" when they agree: every
// member's version is known and the same, every member's discovery is
// read, current and lists the same resources, and none is away.
func skewOf(t *route.Table, statuses map[string]Status) string {
	servers := append([]route.Server{t.Local}, t.Peers...)
	var why []string
	for _, s := range servers {
		st := statuses[s.ID]
		switch {
		case s.Departed:
			why = append(why, s.ID+" left within the grace")
		case !st.Healthy:
			why = append(why, s.ID+" is away")
		case s.Unknown || s.Caps == nil:
			why = append(why, s.ID+"'s discovery is not known yet")
		case s.Lost != nil:
			why = append(why, s.ID+" came back serving less")
		}
	}
	versions := map[string][]string{}
	for _, s := range servers {
		if v := statuses[s.ID].Version; v != "" && !s.Departed {
			versions[v] = append(versions[v], s.ID)
		}
	}
	if len(versions) > 1 {
		var vs []string
		for v, ids := range versions {
			slices.Sort(ids)
			vs = append(vs, v+" on "+strings.Join(ids, ","))
		}
		slices.Sort(vs)
		why = append(why, "versions differ: "+strings.Join(vs, "; "))
	}
	if d := servesDiffer(servers); d != "" {
		why = append(why, d)
	}
	return strings.Join(why, "; ")
}

// servesDiffer names one resource some members list and others do not.
func servesDiffer(servers []route.Server) string {
	var known []route.Server
	for _, s := range servers {
		if s.Caps != nil && !s.Departed {
			known = append(known, s)
		}
	}
	for i, a := range known {
		for _, b := range known[i+1:] {
			if what := firstMissing(a.Caps, b.Caps); what != "" {
				return fmt.Sprintf("what they serve differs: %s lists %s, %s does not", a.ID, what, b.ID)
			}
			if what := firstMissing(b.Caps, a.Caps); what != "" {
				return fmt.Sprintf("what they serve differs: %s lists %s, %s does not", b.ID, what, a.ID)
			}
		}
	}
	return ""
}

// firstMissing is a group/version/resource a lists and b does not, or "".
func firstMissing(a, b route.Capabilities) string {
	ca, ok := a.(*discovery.Capabilities)
	if !ok {
		return ""
	}
	for _, gv := range ca.GroupVersions() {
		theirs := b.Resources(gv)
		for _, r := range a.Resources(gv) {
			if _, found := slices.BinarySearch(theirs, r); !found {
				return gv.String() + "/" + r
			}
		}
	}
	return ""
}
