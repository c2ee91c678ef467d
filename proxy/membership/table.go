package membership

import (
	"slices"
	"time"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

// publish rebuilds the routing table and the merged discovery's healthy
// set. It runs on every health or discovery change, never per request.
func (m *Members) publish() {
	// Serialized, so a table built from older state never replaces a
	// newer one.
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	m.mu.Lock()
	now := m.now()
	var healthy []string
	statuses := make(map[string]Status, len(m.servers))
	doubts := make(map[string]doubt, len(m.servers))
	localInRouting := false
	for id, s := range m.servers {
		st := s.status()
		statuses[id] = st
		doubts[id] = s.doubt()
		// The merged view keeps the local server's last document while
		// it is away: a restart of the node's own apiserver must not
		// make its types vanish from discovery (or fail it).
		if st.Healthy && st.Departed == nil || st.Local {
			healthy = append(healthy, id)
		}
		if st.Local {
			localInRouting = s.inRouting(now)
		}
	}
	onChange, builtIn := m.cfg.OnChange, m.builtIn.groups
	m.mu.Unlock()

	m.store.SetHealthy(healthy)
	inGrace := func(start time.Time) bool { return m.inGrace(start, now) }
	inHold := func(start time.Time) bool { return m.inHold(start, now) }
	m.store.SetAway(awayDocs(m.store.Snapshot(), statuses, doubts, inGrace))
	snap := m.store.Snapshot()
	t := &route.Table{Served: served(snap, statuses, doubts, inHold), BuiltIn: builtIn}
	for id, st := range statuses {
		rs := route.Server{ID: id, Healthy: st.Healthy, Latency: st.Latency, Departed: st.Departed != nil}
		if c := snap.Capabilities(id); c != nil {
			rs.Caps = c // a nil *Capabilities must stay a nil interface
		} else {
			// Re-evaluated at least every RefreshInterval, when the
			// refresh loop publishes.
			rs.Unknown = st.Departed == nil && inGrace(st.Joined)
		}
		// Down and not re-read since, a server may be back on another
		// version — departed too: kube-apiserver's graceful shutdown
		// takes it out of the kubernetes EndpointSlice, and it is listed
		// again only after it is ready.
		d := doubts[id]
		rs.Unknown = rs.Unknown || d.unconfirmed && inGrace(d.downSince)
		// A departed server keeps its rollback's grace too: one that
		// shuts down for its next upgrade leaves the cluster's list
		// while what it served before the rollback is still held. Held
		// past the grace for its settle: discovery no longer lists it.
		switch {
		case d.lost != nil && inHold(d.lostSince):
			rs.Lost = d.lost
		case d.unconfirmed && d.preDown != nil && inHold(d.downSince):
			// Until the first read after its return is judged, what it
			// served before is all routing may assume it lost.
			rs.Lost = d.preDown
		}
		if st.Local {
			rs.Healthy = localInRouting // rule 3a: away until back, confirmed and settled
			t.SetLocal(rs)
		} else {
			t.Peers = append(t.Peers, rs)
		}
	}
	m.tableAt.Store(now.UnixNano())
	m.table.Store(t)
	m.noteEdge(statuses, doubts, now)
	m.noteSkew(skewOf(t, statuses), now)
	if onChange != nil {
		onChange()
	}
}

// noteEdge records the next instant at which a grace or its settle ends
// for what this table was built from — when the table must be built again
// though nothing else changed — and wakes Run to wait for it.
func (m *Members) noteEdge(statuses map[string]Status, doubts map[string]doubt, now time.Time) {
	var next time.Time
	consider := func(start time.Time) {
		if start.IsZero() {
			return
		}
		for _, end := range []time.Time{m.graceEnd(start), m.holdEnd(start)} {
			if end.After(now) && (next.IsZero() || end.Before(next)) {
				next = end
			}
		}
	}
	for id, st := range statuses {
		consider(st.Joined)
		if st.Departed != nil {
			consider(*st.Departed)
		}
		d := doubts[id]
		consider(d.downSince)
		consider(d.lostSince)
	}
	if next.IsZero() {
		m.nextEdge.Store(0) // none: the zero Time's UnixNano is not 0
	} else {
		m.nextEdge.Store(next.UnixNano())
	}
	select {
	case m.edgeMoved <- struct{}{}:
	default:
	}
}

// doubt is what routing must not take for granted about a server.
type doubt struct {
	unconfirmed bool
	downSince   time.Time
	preDown     *discovery.Capabilities
	preDownDoc  *discovery.Doc
	lost        *discovery.Capabilities
	lostDoc     *discovery.Doc
	lostSince   time.Time
}

func (s *server) doubt() doubt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return doubt{s.unconfirmed, s.downSince, s.preDown, s.preDownDoc, s.lost, s.lostDoc, s.lostSince}
}

// awayDocs are the docs of servers away within the grace, in ID order:
// down or departed (their last-known doc), or back serving less (what they
// served before).
func awayDocs(snap *discovery.Snapshot, statuses map[string]Status, doubts map[string]doubt, inGrace func(time.Time) bool) []*discovery.Doc {
	ids := make([]string, 0, len(statuses))
	for id := range statuses {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []*discovery.Doc
	for _, id := range ids {
		st, d := statuses[id], doubts[id]
		switch {
		case st.Departed != nil && inGrace(*st.Departed),
			!st.Healthy && d.unconfirmed && inGrace(d.downSince):
			if doc := snap.Servers[id].Doc; doc != nil {
				out = append(out, doc)
			}
		}
		switch {
		case d.lostDoc != nil && inGrace(d.lostSince):
			out = append(out, d.lostDoc)
		case d.unconfirmed && d.preDownDoc != nil && inGrace(d.downSince):
			out = append(out, d.preDownDoc)
		}
	}
	return out
}

// served is what some member served within the grace and its settle
// (inHold): every document membership holds (members', and departed
// servers' within theirs) and what servers served before they went down
// or came back serving less. Rule 5 holds only these types: any other is
// absent, a genuine 404 at once, even while a peer is away or not known
// yet.
func served(snap *discovery.Snapshot, statuses map[string]Status, doubts map[string]doubt, inHold func(time.Time) bool) route.Capabilities {
	var out anyOf
	for _, id := range snap.IDs {
		st, member := statuses[id]
		if c := snap.Capabilities(id); c != nil && member && (st.Departed == nil || inHold(*st.Departed)) {
			out = append(out, c)
		}
	}
	for _, d := range doubts {
		if d.lost != nil && inHold(d.lostSince) {
			out = append(out, d.lost)
		}
		if d.unconfirmed && d.preDown != nil && inHold(d.downSince) {
			out = append(out, d.preDown)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
