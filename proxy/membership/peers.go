package membership

import (
	"net/url"
	"time"
)

// maxPeers bounds the peers followed: each costs probes, discovery
// fetches and connections, and a writer of leases or EndpointSlices must
// not make skewgate follow thousands.
const maxPeers = 32

// SetPeers makes the peer set equal to peers (static and discovered ones
// together). New servers are probed at once. A server that is no longer
// listed is departed: never routed to, but for the grace what it served
// still answers 503, not 404 — a server that shut down gracefully removed
// itself from the endpoints a moment ago, and its resources are temporarily
// unavailable, not absent. Listed again, it is a member again.
func (m *Members) SetPeers(peers []*url.URL) {
	want := map[string]*url.URL{}
	for _, u := range peers {
		if id := ID(u); id != m.localID {
			want[id] = u
		}
		if len(want) == maxPeers {
			m.cfg.Log.Error("more apiservers listed than skewgate follows: the rest are ignored", "max", maxPeers, "listed", len(peers))
			break
		}
	}
	now := m.now()
	m.mu.Lock()
	for id, u := range want {
		s, ok := m.servers[id]
		if !ok {
			s = m.add(u, false)
			m.cfg.Log.Info("peer apiserver joined", "server", id, "url", u.String())
			if m.ctx != nil {
				m.start(m.ctx, id, s)
			}
			continue
		}
		if s.status().Departed != nil {
			m.cfg.Log.Info("departed peer apiserver listed again", "server", id)
		}
		s.setDeparted(time.Time{})
	}
	for id, s := range m.servers {
		if _, ok := want[id]; !ok && !s.local && s.status().Departed == nil {
			s.setDeparted(now)
			m.endStreamsIfOut(s)
			m.cfg.Log.Warn("peer apiserver departed: what it served answers 503, not 404, for the grace", "server", id, "grace ends", m.graceEnd(now))
		}
	}
	m.mu.Unlock()
	m.publish()
}

// forgetDeparted drops departed servers whose grace and its settle ended.
func (m *Members) forgetDeparted(now time.Time) {
	var gone []string
	m.mu.Lock()
	for id, s := range m.servers {
		st := s.status()
		if st.Departed == nil || m.inHold(*st.Departed, now) {
			continue
		}
		if s.stop != nil {
			s.stop()
		}
		s.backend.CloseAll()
		delete(m.servers, id)
		delete(m.kicks, id)
		gone = append(gone, id)
	}
	m.mu.Unlock()
	for _, id := range gone {
		m.cfg.Log.Info("departed peer apiserver forgotten after its grace", "server", id)
		m.store.Forget(id)
	}
	if len(gone) > 0 {
		m.publish()
	}
}
