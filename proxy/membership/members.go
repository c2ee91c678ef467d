package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/transport"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// Identity skewgate asserts (through the front-proxy headers) for its own
// probes and discovery reads; kube-apiserver's default RBAC lets every
// authenticated user read discovery, and /readyz is public.
const Identity = "system:skewgate"

// Config configures Members.
type Config struct {
	Local *url.URL
	// LocalServerName is the name the local apiserver's certificate is
	// verified by, when not the URL's host (forward.Trust.ServerName).
	LocalServerName string
	Peers           []*url.URL
	Trust           forward.Trust
	// ProbeInterval and ProbeTimeout drive /readyz probes.
	ProbeInterval, ProbeTimeout time.Duration
	// RefreshInterval is how often each server's discovery is re-read
	// (conditionally, by ETag).
	RefreshInterval time.Duration
	// MissRefreshInterval rate-limits the refresh a routing miss asks for.
	MissRefreshInterval time.Duration
	// Grace is the rollback grace (grace.go): how long a server that
	// departed, came back serving less or went down still counts as
	// "serving what it served" (rule 5: 503, not 404). Zero:
	// DefaultGrace; NoGrace disables it.
	Grace time.Duration
	// WindowHold is how long the skew window stays open after the members
	// last differed (default 10 minutes).
	WindowHold time.Duration
	// WindowDebounce is how long the members' built-in types must differ
	// (with their versions alike) before the window opens (default 30 s).
	WindowDebounce time.Duration
	// UpgradeSignal, if set, reports whether a node's apiserver upgrade or
	// rollback has begun (its static-pod manifest names another version),
	// and why: the window opens at once while it does.
	UpgradeSignal func() (on bool, reason string)
	// OnChange, if set, is called after every published table change.
	OnChange func()
	// PeerMaxInFlight bounds the short requests in flight to each peer
	// (default 400, kube-apiserver's --max-requests-inflight); more get 429.
	PeerMaxInFlight int
	// UserAgent names skewgate and its version in its own requests.
	UserAgent string
	// Log receives every change an operator needs to see, once: a server
	// joins, turns unhealthy, recovers, departs, is forgotten; its
	// discovery gains or loses group/versions (nil: discarded).
	Log *slog.Logger
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.ProbeInterval, 500*time.Millisecond)
	set(&c.ProbeTimeout, time.Second)
	set(&c.RefreshInterval, 10*time.Second)
	set(&c.MissRefreshInterval, 5*time.Second)
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	set(&c.WindowHold, 10*time.Minute)
	set(&c.WindowDebounce, 30*time.Second)
	if c.PeerMaxInFlight == 0 {
		c.PeerMaxInFlight = 400
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Members tracks the apiservers and publishes routing snapshots.
type Members struct {
	cfg      Config
	localID  string
	store    *discovery.Store
	table    atomic.Pointer[route.Table]
	lastMiss atomic.Int64 // unix nanos of the last miss-driven refresh

	pubMu   sync.Mutex
	mu      sync.Mutex
	servers map[string]*server
	kicks   map[string]chan struct{}
	ctx     context.Context

	saveMu    sync.Mutex
	saved     []byte          // what SaveState last wrote
	stateFile StateFileStatus // how the last write went

	skew skewWatch
	// builtIn are the groups kube-apiserver serves itself (builtin.go),
	// releases what each version served (releases.go); under mu.
	builtIn  builtIns
	releases map[string]Release
	// graceUntil is the cluster's override of every grace's end (nil:
	// none); see SetGraceUntil.
	graceUntil atomic.Pointer[time.Time]
	// now is the clock graces are judged by (a seam for tests).
	now func() time.Time
	// nextEdge (unix nanos, 0: none) is when a grace or its settle next
	// ends for the published table; edgeMoved wakes Run when it changes.
	nextEdge atomic.Int64
	// tableAt (unix nanos) is the instant the published table judged
	// graces at.
	tableAt   atomic.Int64
	edgeMoved chan struct{}
	// awaiting is set while the cluster's list of apiservers is still to
	// be read (AwaitCluster): members are not all known before.
	awaiting atomic.Bool
}

// AwaitCluster says that the peers come from the cluster too: Ready waits
// until ClusterListed.
func (m *Members) AwaitCluster() { m.awaiting.Store(true) }

// ClusterListed says the cluster's apiservers have been read once.
func (m *Members) ClusterListed() {
	m.awaiting.Store(false)
	m.publish()
}

// ID names a server by its URL's host:port, as in X-Skewgate-Server.
func ID(u *url.URL) string { return u.Host }

// New returns Members for cfg; call Run to start probing.
func New(cfg Config) (*Members, error) {
	cfg.defaults()
	if cfg.Local == nil {
		return nil, fmt.Errorf("membership: no local apiserver")
	}
	m := &Members{cfg: cfg, localID: ID(cfg.Local), store: discovery.NewStore(),
		servers: map[string]*server{}, kicks: map[string]chan struct{}{}, now: time.Now,
		edgeMoved: make(chan struct{}, 1)}
	m.add(cfg.Local, true)
	for _, p := range cfg.Peers {
		if ID(p) == m.localID {
			continue // the local server listed among its peers
		}
		m.add(p, false)
	}
	m.publish()
	return m, nil
}

func (m *Members) add(u *url.URL, local bool) *server {
	trust := m.cfg.Trust
	if local {
		trust.ServerName = m.cfg.LocalServerName
	} else {
		// Whoever listed it (a lease, an EndpointSlice, a flag), it
		// proves itself an apiserver in every handshake, or it is never
		// healthy: never probed, fetched, routed to or merged.
		trust.Peer = true
	}
	b := forward.NewBackend(ID(u), u, trust)
	if !local {
		b.LimitInFlight(m.cfg.PeerMaxInFlight)
		b.BreakOnFailures()
	}
	s := &server{backend: b, client: m.client(b), local: local, passes: passThreshold - 1, joined: time.Now()}
	m.servers[s.backend.ID] = s
	m.kicks[s.backend.ID] = make(chan struct{}, 1)
	return s
}

// Run probes every server and refreshes its discovery until ctx ends.
func (m *Members) Run(ctx context.Context) {
	m.mu.Lock()
	m.ctx = ctx
	for id, s := range m.servers {
		m.start(ctx, id, s)
	}
	m.mu.Unlock()
	// Graces and their settles end with time alone: the table is built
	// again at the next such end publish saw (noteEdge), so rule 5's 503
	// ends at the instant `skewgate routes` names, and at least every
	// tick besides.
	tick := min(max(m.cfg.Grace/10, time.Second), 10*time.Second)
	t := time.NewTimer(m.untilEdge(tick))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.edgeMoved:
		case <-t.C:
			m.forgetDeparted(m.now())
			m.publish()
		}
		t.Reset(m.untilEdge(tick))
	}
}

// untilEdge is how long Run waits before building the table again: until
// the next grace edge, at most tick.
func (m *Members) untilEdge(tick time.Duration) time.Duration {
	next := m.nextEdge.Load()
	if next == 0 {
		return tick
	}
	// A millisecond past it: the edge itself still holds (now.Before(end)).
	return min(tick, max(time.Until(time.Unix(0, next))+time.Millisecond, time.Millisecond))
}

func (m *Members) start(ctx context.Context, id string, s *server) {
	ctx, s.stop = context.WithCancel(ctx)
	go m.probeLoop(ctx, s, s.client)
	go m.refreshLoop(ctx, id, m.kicks[id], &discovery.HTTPFetcher{Client: s.client, BaseURL: s.backend.URL.String()})
}

// client is an HTTP client for skewgate's own requests to b.
func (m *Members) client(b *forward.Backend) *http.Client {
	var rt http.RoundTripper = transport.NewAuthProxyRoundTripper(Identity, "", []string{Identity}, nil, b.Transport())
	if m.cfg.UserAgent != "" {
		rt = transport.NewUserAgentRoundTripper(m.cfg.UserAgent, rt)
	}
	return &http.Client{Transport: rt, Timeout: 30 * time.Second}
}

// LocalID is the local server's ID.
func (m *Members) LocalID() string { return m.localID }

// Table is the current routing snapshot; never nil, never modified.
func (m *Members) Table() *route.Table { return m.table.Load() }

// Discovery is the current discovery snapshot (per-server docs and the
// merged view of the healthy servers).
func (m *Members) Discovery() *discovery.Snapshot { return m.store.Snapshot() }

// Backends returns the backends for ids, skipping unknown ones.
func (m *Members) Backends(ids []string) []*forward.Backend {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*forward.Backend, 0, len(ids))
	for _, id := range ids {
		if s, ok := m.servers[id]; ok {
			out = append(out, s.backend)
		}
	}
	return out
}

// ConnFailed takes server id out of routing at once after a failed
// connection; probes bring it back.
func (m *Members) ConnFailed(id string, err error) {
	m.mu.Lock()
	s, ok := m.servers[id]
	m.mu.Unlock()
	if ok && s.connFailed(err, m.now()) {
		m.notePreDown(s)
		m.cfg.Log.Warn("apiserver unhealthy: connection failed", "server", id, "err", err)
		m.endStreamsIfOut(s)
		m.publish()
	}
}

// RefreshSoon asks every server for fresh discovery, at most once per
// MissRefreshInterval: a routing miss may mean a CRD or API appeared.
func (m *Members) RefreshSoon() {
	now := time.Now().UnixNano()
	last := m.lastMiss.Load()
	if now-last < int64(m.cfg.MissRefreshInterval) || !m.lastMiss.CompareAndSwap(last, now) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.kicks {
		kick(k)
	}
}

// DeniedListed judges a 404 of server id saying it has no type gvr, which
// its discovery lists. It reports true (stale: keep the 404 from the
// caller, answer 503 or ask another server) while the server's discovery
// may be out of date, and re-reads it, at most once a second: the server
// may have restarted on another version. Once a discovery read that began
// after such a denial still lists the type, the 404 is the type's own
// (an aggregated API's backend, say) and false is reported for it until
// the server's discovery or health changes.
func (m *Members) DeniedListed(id string, gvr schema.GroupVersionResource) bool {
	m.mu.Lock()
	s, ok := m.servers[id]
	k := m.kicks[id]
	m.mu.Unlock()
	if !ok {
		return true
	}
	st := m.store.Snapshot().Servers[id]
	reread := s.denied(gvr, st.Doc, st.FetchedAt, st.Capabilities.Serves(gvr, ""), time.Now())
	if reread {
		kick(k)
	}
	return s.deniedStale(gvr, st.Doc)
}

func kick(k chan struct{}) {
	select {
	case k <- struct{}{}:
	default:
	}
}

func (m *Members) awaitsReread(id string) bool {
	m.mu.Lock()
	s, ok := m.servers[id]
	m.mu.Unlock()
	return ok && s.awaitsReread()
}

// localUp reports whether the local server is up or not probed yet.
func (m *Members) localUp() bool {
	m.mu.Lock()
	s := m.servers[m.localID]
	m.mu.Unlock()
	st := s.status()
	return st.Healthy || st.LastProbe.IsZero()
}

// Statuses lists every server, sorted by ID.
func (m *Members) Statuses() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Ready reports, as an error naming what is missing, whether skewgate knows
// enough to route: every member probed once, and the discovery of the local
// server and of every healthy peer read once. Before that a request for a
// peer-only resource would get the local server's false 404.
func (m *Members) Ready() error {
	if m.awaiting.Load() {
		return errors.New("the cluster's apiservers not listed yet")
	}
	snap := m.Discovery()
	if ds := snap.Servers[m.localID]; (ds.Doc == nil || ds.Restored) && m.localUp() {
		// Routing by rule 3a needs no local document while the local
		// server is down: its requests go to peers that serve them. A
		// restored one is the previous run's: the server may have come
		// back on another version since.
		return fmt.Errorf("local discovery (%s) not read yet", m.localID)
	}
	for _, st := range m.Statuses() {
		switch ds := snap.Servers[st.ID]; {
		case st.Departed != nil:
		case st.LastProbe.IsZero():
			return fmt.Errorf("%s not probed yet", st.ID)
		case st.Healthy && (ds.FetchedAt.IsZero() || ds.Restored) && ds.ErrAt.IsZero():
			return fmt.Errorf("discovery of %s not read yet", st.ID)
		case m.awaitsReread(st.ID) && ds.ErrAt.IsZero():
			// Else its doubt would open a skew window that then holds
			// for the hold time after every restart of skewgate.
			return fmt.Errorf("discovery of %s not read again since skewgate restarted", st.ID)
		}
	}
	return nil
}
