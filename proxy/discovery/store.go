package discovery

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ServerState is what the Store knows about one server.
type ServerState struct {
	// Doc is the last-known-good discovery, nil if no fetch succeeded yet.
	Doc          *Doc
	Capabilities *Capabilities
	// FetchedAt is when Doc was last confirmed (a 200 or a 304).
	FetchedAt time.Time
	// Err is the last fetch error, nil since the last success; ErrAt is when.
	Err   error
	ErrAt time.Time
	// Restored marks a Doc from an earlier run (see Store.Restore) that no
	// fetch has confirmed yet.
	Restored bool
}

// Store holds every server's last-known-good discovery and the merged view
// of the healthy ones. Writers (Refresh, Record, Forget, SetHealthy) are
// serialized and recompute capabilities and the merged view only when a doc
// or the healthy set changes; readers take an immutable Snapshot with one
// atomic load, so the per-request path never locks or recomputes.
type Store struct {
	mu      sync.Mutex
	servers map[string]ServerState
	healthy []string
	// away are docs of servers away within the grace window: their
	// group-versions the healthy servers lack are in the view as Stale.
	away   []*Doc
	merged *Merged
	snap   atomic.Pointer[Snapshot]
	now    func() time.Time
}

// NewStore returns an empty store: no servers, no healthy set, empty view.
func NewStore() *Store {
	s := &Store{servers: map[string]ServerState{}, now: time.Now}
	s.merged = Merge(nil, nil)
	s.publishLocked()
	return s
}

// Snapshot returns the current state. It is never nil and never changes.
func (s *Store) Snapshot() *Snapshot { return s.snap.Load() }

// Refresh fetches server id's discovery with f, conditionally on the doc it
// has, and records the outcome. On error the last-known-good doc is kept and
// the error is recorded and returned. Run at most one Refresh per server at a
// time; different servers may refresh concurrently.
func (s *Store) Refresh(ctx context.Context, id string, f Fetcher) error {
	doc, err := f.Fetch(ctx, s.Snapshot().Servers[id].Doc)
	s.Record(id, doc, err)
	return err
}

// Record stores the outcome of a fetch done by the caller: err != nil keeps
// the previous doc and records the error; otherwise doc becomes the server's
// doc (the same pointer as before only refreshes FetchedAt).
func (s *Store) Record(id string, doc *Doc, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, at := s.servers[id], s.now()
	if err != nil || doc == nil {
		st.Err, st.ErrAt = err, at
		s.servers[id] = st
		s.publishLocked()
		return
	}
	changed := doc != st.Doc
	st.FetchedAt, st.Err, st.Restored = at, nil, false
	if changed {
		st.Doc, st.Capabilities = doc, NewCapabilities(doc)
	}
	s.servers[id] = st
	if changed && slices.Contains(s.healthy, id) {
		s.remergeLocked()
	}
	s.publishLocked()
}

// Restore sets server id's doc to one an earlier run fetched at fetchedAt,
// if it has none: the last-known-good until a fetch confirms it (the ETag
// is kept, so an unchanged server answers 304) or replaces it.
func (s *Store) Restore(id string, doc *Doc, fetchedAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.servers[id]
	if st.Doc != nil || doc == nil {
		return
	}
	st.Doc, st.Capabilities, st.FetchedAt, st.Restored = doc, NewCapabilities(doc), fetchedAt, true
	s.servers[id] = st
	if slices.Contains(s.healthy, id) {
		s.remergeLocked()
	}
	s.publishLocked()
}

// Forget drops a server and its doc, e.g. when it leaves the membership
// after any grace period the caller keeps.
func (s *Store) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.servers[id]; !ok {
		return
	}
	delete(s.servers, id)
	if slices.Contains(s.healthy, id) {
		s.remergeLocked()
	}
	s.publishLocked()
}

// SetHealthy sets which servers the merged view is made of. Unknown IDs are
// kept and count once a doc is recorded for them.
func (s *Store) SetHealthy(ids []string) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(ids, s.healthy) {
		return
	}
	s.healthy = ids
	s.remergeLocked()
	s.publishLocked()
}

// SetAway sets the docs of servers that are away within the grace window
// (down, departed, or back on a version that serves less). What only they
// listed stays in the merged view, marked Stale, as kube-apiserver marks an
// unavailable API: clients see a failed group-version and retry, instead of
// a type that vanished — which garbage collection and namespace deletion
// would act on like on a false 404.
func (s *Store) SetAway(docs []*Doc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(docs, s.away) {
		return
	}
	s.away = docs
	s.remergeLocked()
	s.publishLocked()
}

func (s *Store) remergeLocked() {
	docs := make(map[string]*Doc, len(s.servers))
	for id, st := range s.servers {
		docs[id] = st.Doc
	}
	s.merged = Merge(docs, s.healthy)
	if len(s.away) > 0 {
		s.merged = withStale(s.merged, s.away)
	}
}

func (s *Store) publishLocked() {
	servers := make(map[string]ServerState, len(s.servers))
	for id, st := range s.servers {
		servers[id] = st
	}
	s.snap.Store(newSnapshot(servers, s.healthy, s.merged))
}
