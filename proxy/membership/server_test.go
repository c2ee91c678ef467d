package membership

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/skewgate/skewgate/proxy/forward"
)

func TestHealthThresholds(t *testing.T) {
	s := &server{backend: forward.NewBackend("b", &url.URL{Scheme: "https", Host: "b:6443"}, forward.Trust{}), passes: passThreshold - 1}
	now, fail := time.Now(), errors.New("refused")
	steps := []struct {
		err     error
		healthy bool
	}{
		{nil, true},   // the first good probe admits a new server
		{fail, true},  // one failed probe is noise
		{fail, false}, // two are not
		{nil, false},  // one good probe is not enough to come back
		{nil, true},
	}
	for i, st := range steps {
		s.observe(time.Millisecond, st.err, now)
		if got := s.status().Healthy; got != st.healthy {
			t.Fatalf("step %d: healthy = %v, want %v", i, got, st.healthy)
		}
	}
	if !s.connFailed(fail, time.Now()) || s.status().Healthy {
		t.Fatal("a failed connection must take a healthy server out at once")
	}
}

func TestSetPeersDepartsAndForgets(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.SetPeers([]*url.URL{u("10.0.0.3:6443"), u("127.0.0.1:6443")})
	byID := map[string]Status{}
	for _, st := range m.Statuses() {
		byID[st.ID] = st
	}
	if len(byID) != 3 || byID["10.0.0.2:6443"].Departed == nil || byID["10.0.0.3:6443"].Departed != nil || !byID["127.0.0.1:6443"].Local {
		t.Fatalf("after SetPeers: %+v", byID)
	}
	for _, p := range m.Table().Peers {
		if p.ID == "10.0.0.2:6443" && !p.Departed {
			t.Error("the routing table does not mark the departed peer")
		}
	}
	m.forgetDeparted(time.Now().Add(30 * time.Second))
	if len(m.Statuses()) != 3 {
		t.Error("a departed peer was forgotten within its grace window")
	}
	m.forgetDeparted(time.Now().Add(2 * time.Minute))
	if len(m.Statuses()) != 2 {
		t.Errorf("departed peer kept past its grace: %+v", m.Statuses())
	}
	m.SetPeers([]*url.URL{u("10.0.0.3:6443")})
	for _, st := range m.Statuses() {
		if st.Departed != nil {
			t.Errorf("%s departed while listed", st.ID)
		}
	}
}

func TestRefreshSoonIsRateLimited(t *testing.T) {
	m, err := New(Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:6443"}, MissRefreshInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	kicked := m.kicks[m.LocalID()]
	for i := 0; i < 100; i++ {
		m.RefreshSoon() // a burst of misses: an unknown resource asked for in a loop
	}
	if len(kicked) != 1 {
		t.Fatalf("%d refreshes queued for a burst of misses, want 1", len(kicked))
	}
	<-kicked
	m.RefreshSoon()
	if len(kicked) != 0 {
		t.Fatal("a second refresh within the interval")
	}
}

// TestUnknownPeerWithinGrace: a member whose discovery was never read may
// serve anything for DepartGrace after it joined; a departed one is not
// "unknown", and past the grace the mark goes.
func TestUnknownPeerWithinGrace(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443"), u("10.0.0.3:6443")}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.SetPeers([]*url.URL{u("10.0.0.2:6443")}) // 10.0.0.3 departs
	unknown := func() map[string]bool {
		out := map[string]bool{}
		for _, p := range m.Table().Peers {
			out[p.ID] = p.Unknown
		}
		return out
	}
	if got := unknown(); !got["10.0.0.2:6443"] || got["10.0.0.3:6443"] {
		t.Fatalf("just joined: unknown = %v, want only the member 10.0.0.2", got)
	}
	m.mu.Lock()
	m.servers["10.0.0.2:6443"].joined = time.Now().Add(-2 * time.Minute)
	m.mu.Unlock()
	m.publish()
	if got := unknown(); got["10.0.0.2:6443"] {
		t.Fatalf("past the grace: unknown = %v", got)
	}
}

// Bug (make scale, 2,000 watches a side): with node-a away its whole load
// landed on node-b, whose /readyz then took longer than the 1 s probe
// timeout; skewgate took node-b out of routing and ended every connection
// to it, cutting the watches it was serving. A probe with no answer in
// time is slow, not failed, until no probe was answered for slowGrace; an
// answer that is not ready counts at once.
func TestSlowProbesKeepAServer(t *testing.T) {
	slow := make(chan struct{})
	defer close(slow)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	m := &Members{cfg: Config{ProbeTimeout: 50 * time.Millisecond}}
	err := m.probe(context.Background(), srv.Client(), srv.URL+"/readyz")
	if !errors.Is(err, errSlow) {
		t.Fatalf("a probe with no answer in time: %v, want errSlow", err)
	}
	if err := m.probe(context.Background(), srv.Client(), srv.URL+"/livez"); err == nil || errors.Is(err, errSlow) {
		t.Fatalf("an answer that is not ready: %v, want a failure that is not errSlow", err)
	}

	s := &server{backend: forward.NewBackend("b", &url.URL{Scheme: "https", Host: "b:6443"}, forward.Trust{})}
	at := time.Now()
	s.observe(time.Millisecond, nil, at)
	s.observe(time.Millisecond, nil, at)
	for i := range 6 { // 3 s of slow probes, one every 500 ms
		at = at.Add(500 * time.Millisecond)
		s.observe(time.Second, err, at)
		if !s.status().Healthy {
			t.Fatalf("out after %d slow probes", i+1)
		}
	}
	at = at.Add(500 * time.Millisecond)
	s.observe(time.Millisecond, nil, at) // answered: the slowGrace starts again
	for at2 := at; at2.Sub(at) <= slowGrace+time.Second; at2 = at2.Add(500 * time.Millisecond) {
		s.observe(time.Second, err, at2)
		if at2.Sub(at) < slowGrace && !s.status().Healthy {
			t.Fatalf("out %s after the last answer, before slowGrace", at2.Sub(at))
		}
	}
	if s.status().Healthy {
		t.Fatalf("still healthy after %s of probes without an answer: a frozen server must leave routing", slowGrace+time.Second)
	}

	s2 := &server{backend: forward.NewBackend("c", &url.URL{Scheme: "https", Host: "c:6443"}, forward.Trust{})}
	s2.observe(time.Millisecond, nil, at)
	s2.observe(time.Millisecond, nil, at)
	for range failThreshold {
		at = at.Add(500 * time.Millisecond)
		s2.observe(time.Millisecond, errors.New("readyz: 500 Internal Server Error"), at)
	}
	if s2.status().Healthy {
		t.Fatal("answers that are not ready must count at once, slow or not")
	}
}
