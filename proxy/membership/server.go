// Package membership knows the apiservers skewgate routes among: the local
// one and its peers, whether each is healthy (active /readyz probes plus
// failed connections), how fast each answers, and — through the discovery
// store — what each serves. It publishes that as a route.Table snapshot.
package membership

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/forward"
)

// Health thresholds. A server leaves routing after failThreshold failed
// probes (or at once on a failed connection) and returns after
// passThreshold good ones: with a 500 ms period and a 1 s probe timeout a
// dead peer is out within about 2.5 s.
const (
	failThreshold = 2
	passThreshold = 2
	latencyWeight = 0.3 // of the newest sample in the moving average
)

// A probe that got no answer within the probe timeout is slow, not failed:
// a server that takes a whole node's load while its neighbour restarts
// answers /readyz late, and taking it out of routing (and ending every
// watch through it) for that fails what it would have served. Slow probes
// count as failures only once no probe has been answered for slowGrace: a
// frozen or unreachable server is out within about slowGrace plus a probe
// period (its HTTP/2 connections' pings end its streams even sooner). An
// answer that is not ready, or a refused or broken connection, counts at
// once.
const slowGrace = 5 * time.Second

// errSlow marks a probe that got no answer within the probe timeout.
var errSlow = errors.New("no answer within the probe timeout")

// server is one apiserver's health as the prober sees it.
type server struct {
	backend *forward.Backend
	client  *http.Client // skewgate's own requests, as Identity
	local   bool
	joined  time.Time

	mu        sync.Mutex
	healthy   bool
	fails     int
	passes    int
	latency   time.Duration
	lastErr   error
	lastProbe time.Time
	// lastAnswer is when a probe was last answered ready.
	lastAnswer time.Time
	// lastHealthy is when a probe last found it healthy (or, for a server
	// restored from the state file, when the previous run last did).
	lastHealthy time.Time
	// departed is when it left membership; zero while it is a member.
	departed time.Time
	// version is the apiserver's /version gitVersion, as last read.
	version string
	// downSince is when it last turned unhealthy. Until a discovery
	// read that began after it came back succeeds (unconfirmed), what it
	// serves is not known: it may have restarted on another version.
	downSince   time.Time
	unconfirmed bool
	// restored marks a member the state file brought back unconfirmed:
	// skewgate is not ready before it is confirmed, or found down.
	restored bool
	upGen    uint64 // counts returns to health
	upSince  time.Time
	downs    []time.Time // when it went down, within flapWindow
	// preDown is what it served when it went down; lost is that, kept
	// for the grace that began at lostSince, when it came back serving
	// less.
	preDown    *discovery.Capabilities
	preDownDoc *discovery.Doc
	lost       *discovery.Capabilities
	lostDoc    *discovery.Doc
	lostSince  time.Time
	// deniedAt is when the server last answered that it has no type its
	// discovery lists; genuine holds the types whose such answers a
	// discovery read after the denial confirmed as the type's own, by the
	// doc that confirmed them.
	deniedAt time.Time
	genuine  map[schema.GroupVersionResource]*discovery.Doc
	// stop ends its probe and refresh loops.
	stop func()
}

// deniedReread is how long after a denial a discovery read confirms it,
// and how often a denial may ask for one.
const deniedReread = time.Second

// denied records a denial of gvr, which the server's discovery (doc, read
// at fetched) lists while listed, and reports whether to re-read it now.
func (s *server) denied(gvr schema.GroupVersionResource, doc *discovery.Doc, fetched time.Time, listed bool, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if doc != nil && s.genuine[gvr] == doc {
		return false
	}
	if listed && !s.deniedAt.IsZero() && fetched.After(s.deniedAt) && now.Sub(s.deniedAt) < 10*deniedReread {
		if s.genuine == nil {
			s.genuine = map[schema.GroupVersionResource]*discovery.Doc{}
		}
		s.genuine[gvr] = doc
		return false
	}
	if now.Sub(s.deniedAt) < deniedReread {
		return false // a read is under way
	}
	s.deniedAt = now
	return true
}

// deniedStale reports whether a denial of gvr is to be kept from callers.
func (s *server) deniedStale(gvr schema.GroupVersionResource, doc *discovery.Doc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return doc == nil || s.genuine[gvr] != doc
}

// setDeparted marks the server as gone from membership at t (zero: back).
func (s *server) setDeparted(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.departed = t
}

// observe records one probe outcome and reports whether health changed.
func (s *server) observe(rtt time.Duration, err error, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastProbe = at
	was := s.healthy
	defer s.noteTransition(was, at)
	if errors.Is(err, errSlow) && s.healthy && at.Sub(s.lastAnswer) < slowGrace {
		s.lastErr = err // slow, not out: see slowGrace
		s.sample(rtt)   // and slow: peers that answer sooner are preferred
		return false
	}
	if err != nil {
		s.lastErr, s.passes = err, 0
		s.fails++
		if s.fails >= failThreshold {
			s.healthy = false
		}
		return was != s.healthy
	}
	s.lastErr, s.fails, s.lastAnswer = nil, 0, at
	s.passes++
	if s.passes >= passThreshold || s.healthy {
		s.healthy = true
	}
	if s.healthy && s.departed.IsZero() {
		// A departed server's answers keep it known only for its grace,
		// across restarts too: no renewal while it is not a member.
		s.lastHealthy = at
	}
	s.sample(rtt)
	return was != s.healthy
}

// sample adds one round trip to the moving average; s.mu is held.
func (s *server) sample(rtt time.Duration) {
	if s.latency == 0 {
		s.latency = rtt
	} else {
		s.latency = time.Duration(latencyWeight*float64(rtt) + (1-latencyWeight)*float64(s.latency))
	}
}

// connFailed takes the server out of routing at once: a refused or timed
// out connection is certain, a probe period is not worth waiting for.
func (s *server) connFailed(err error, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.healthy
	s.healthy, s.passes, s.fails, s.lastErr = false, 0, failThreshold, err
	s.noteTransition(was, at)
	return was
}

// noteTransition marks the discovery unconfirmed when the server goes down
// and counts its returns; s.mu is held.
func (s *server) noteTransition(was bool, at time.Time) {
	switch {
	case was && !s.healthy:
		s.downSince, s.unconfirmed, s.restored = at, true, false
		s.genuine = nil // it may come back on another version
		s.downs = append(recent(s.downs, at), at)
	case !was && s.healthy:
		s.upGen++
		s.upSince = at
	}
}

// recent keeps the times within flapWindow before now.
func recent(times []time.Time, now time.Time) []time.Time {
	out := times[:0]
	for _, t := range times {
		if now.Sub(t) < flapWindow {
			out = append(out, t)
		}
	}
	return out
}

// A local server that went down twice within flapWindow (a flapping
// /readyz: etcd trouble) is routed to again only after it stayed healthy
// for settleTime: the node's load must not bounce between it and the
// peers with every probe.
const (
	flapWindow = time.Minute
	settleTime = 10 * time.Second
)

// healthySince reports whether a probe after t left the server healthy
// without a failure counted against it (it passed, or was only slow), and
// it still is a healthy member.
func (s *server) healthySince(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy && s.fails == 0 && s.departed.IsZero() && s.lastProbe.After(t)
}

// down is when the server last turned unhealthy (zero: never seen so).
func (s *server) down() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downSince
}

// inRouting reports whether the local server takes its requests at now:
// healthy, its discovery read again since it returned (it may have come
// back on another version), and settled if it flapped.
func (s *server) inRouting(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.healthy || s.unconfirmed {
		return false
	}
	return len(recent(s.downs, now)) < 2 || now.Sub(s.upSince) >= settleTime
}

// settling reports whether inRouting will change with time alone.
func (s *server) settling(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy && !s.unconfirmed && len(recent(s.downs, now)) >= 2 && now.Sub(s.upSince) < settleTime
}

// confirmable returns the return count a discovery read starts under.
func (s *server) confirmable() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upGen
}

// confirm marks the discovery current after a read that began under gen
// while healthy. It returns what the server served before it went down
// when this is the first confirmation since it came back, else nil.
func (s *server) confirm(gen uint64) (*discovery.Capabilities, *discovery.Doc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unconfirmed || !s.healthy || gen != s.upGen {
		return nil, nil
	}
	s.unconfirmed, s.restored = false, false
	pre, doc := s.preDown, s.preDownDoc
	s.preDown, s.preDownDoc = nil, nil
	return pre, doc
}

// awaitsReread reports whether the server is healthy with discovery the
// state file restored and no read since confirmed: it may have come back
// on another version while skewgate was down.
func (s *server) awaitsReread() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy && s.restored && s.unconfirmed
}

// Status is a server's state for people and metrics.
type Status struct {
	ID        string        `json:"id"`
	URL       string        `json:"url"`
	Local     bool          `json:"local"`
	Healthy   bool          `json:"healthy"`
	Latency   time.Duration `json:"latencyNanos"`
	LastError string        `json:"lastError,omitempty"`
	LastProbe time.Time     `json:"lastProbe"`
	Departed  *time.Time    `json:"departed,omitempty"`
	// Joined is when the server became a member (skewgate's start for
	// --peers).
	Joined time.Time `json:"joined"`
	// Version is the apiserver's gitVersion, as last read ("" before).
	Version string `json:"version,omitempty"`
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{ID: s.backend.ID, URL: s.backend.URL.String(), Local: s.local, Healthy: s.healthy,
		Latency: s.latency, LastProbe: s.lastProbe, Joined: s.joined, Version: s.version}
	if s.lastErr != nil {
		st.LastError = s.lastErr.Error()
	}
	if !s.departed.IsZero() {
		d := s.departed
		st.Departed = &d
	}
	return st
}
