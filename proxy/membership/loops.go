package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
)

// probeLoop probes s's /readyz every ProbeInterval. A server that turns
// healthy gets its discovery re-read at once: it may have restarted on
// another version.
func (m *Members) probeLoop(ctx context.Context, s *server, c *http.Client) {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	for {
		start := time.Now()
		err := m.probe(ctx, c, s.backend.URL.String()+"/readyz")
		if ctx.Err() != nil {
			return
		}
		if s.observe(time.Since(start), err, start) {
			m.notePreDown(s)
			m.logHealth(s.status())
			m.endStreamsIfOut(s)
			if s.status().Healthy {
				m.mu.Lock()
				kick(m.kicks[s.backend.ID])
				m.mu.Unlock()
			}
			m.publish()
		} else if s.local && s.settling(time.Now()) {
			m.publish() // the local server's settle time may have passed
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Members) probe(ctx context.Context, c *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("%w (%s): %w", errSlow, m.cfg.ProbeTimeout, err)
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		// 500 during graceful shutdown: the server is leaving.
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// refreshLoop re-reads server id's discovery every RefreshInterval and
// whenever kicked. Failures keep the last-known-good doc; health, not
// discovery, decides whether the server is routed to.
func (m *Members) refreshLoop(ctx context.Context, id string, kicked <-chan struct{}, f discovery.Fetcher) {
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	for {
		before := m.store.Snapshot().Servers[id].Capabilities.GroupVersions()
		gen, s := m.confirmable(id)
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := m.store.Refresh(fctx, id, f) // the error is kept in the store's state
		cancel()
		if err == nil && s != nil {
			m.confirmed(id, s, gen)
		}
		m.logDiscovery(id, before, m.store.Snapshot().Servers[id].Capabilities.GroupVersions())
		if version, ok := m.readVersion(ctx, id); ok && err == nil {
			m.noteRelease(id, version)
		}
		if ctx.Err() != nil {
			return
		}
		m.publish()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kicked:
		}
	}
}

func (m *Members) logHealth(st Status) {
	if st.Healthy {
		m.cfg.Log.Info("apiserver healthy", "server", st.ID, "local", st.Local)
		return
	}
	m.cfg.Log.Warn("apiserver unhealthy", "server", st.ID, "local", st.Local, "err", st.LastError)
}

// logDiscovery logs which group/versions appeared on or vanished from
// server id, if any did.
func (m *Members) logDiscovery(id string, before, after []schema.GroupVersion) {
	if before == nil && after != nil {
		m.cfg.Log.Info("apiserver discovery read", "server", id, "groupVersions", len(after))
		return
	}
	appeared, vanished := diffGroupVersions(before, after)
	if len(appeared) > 0 || len(vanished) > 0 {
		m.cfg.Log.Info("apiserver discovery changed", "server", id, "appeared", appeared, "vanished", vanished)
	}
}

// diffGroupVersions lists what after has that before lacks, and the
// reverse, as strings.
func diffGroupVersions(before, after []schema.GroupVersion) (appeared, vanished []string) {
	in := func(list []schema.GroupVersion, gv schema.GroupVersion) bool { return slices.Contains(list, gv) }
	for _, gv := range after {
		if !in(before, gv) {
			appeared = append(appeared, gv.String())
		}
	}
	for _, gv := range before {
		if !in(after, gv) {
			vanished = append(vanished, gv.String())
		}
	}
	return appeared, vanished
}

// endStreamsIfOut closes every connection to a peer that left routing
// (unhealthy or departed): watches through it end now, not when TCP gives
// up, so their clients re-list from a server that answers. The local
// server's connections stay: it is the only one for what only it serves.
func (m *Members) endStreamsIfOut(s *server) {
	if st := s.status(); !s.local && (!st.Healthy || st.Departed != nil) {
		s.backend.CloseAll()
	}
}

// readVersion reads server id's /version after each discovery refresh: a
// server that restarted on another version shows it within a refresh. ok
// is false when it was not read now.
func (m *Members) readVersion(ctx context.Context, id string) (version string, ok bool) {
	m.mu.Lock()
	s, ok := m.servers[id]
	m.mu.Unlock()
	if !ok {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := get(ctx, s.client, s.backend.URL.String()+"/version")
	if err != nil {
		return "", false // kept as last read; health and discovery say what matters
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if json.Unmarshal(body, &v) != nil || v.GitVersion == "" {
		return "", false
	}
	s.mu.Lock()
	changed := s.version != "" && s.version != v.GitVersion
	s.version = v.GitVersion
	s.mu.Unlock()
	if changed {
		m.cfg.Log.Info("apiserver version changed", "server", id, "version", v.GitVersion)
	}
	return v.GitVersion, true
}

// noteRelease records what server id served, read just now with its
// version, as that version's release — only from a healthy server: one
// still starting may list less than its release serves.
func (m *Members) noteRelease(id, version string) {
	caps := m.store.Snapshot().Capabilities(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.servers[id]; ok && s.status().Healthy {
		m.recordRelease(id, version, caps, m.now())
	}
}

func (m *Members) confirmable(id string) (uint64, *server) {
	m.mu.Lock()
	s, ok := m.servers[id]
	m.mu.Unlock()
	if !ok {
		return 0, nil
	}
	return s.confirmable(), s
}

// notePreDown keeps what a server served when it went down.
func (m *Members) notePreDown(s *server) {
	if st := s.status(); !st.Healthy {
		ds := m.store.Snapshot().Servers[s.backend.ID]
		s.mu.Lock()
		if s.preDown == nil {
			s.preDown, s.preDownDoc = ds.Capabilities, ds.Doc
		}
		s.mu.Unlock()
	}
}

// confirmed follows the first discovery read after a server came back: if
// it now serves less than before it went down (it restarted on another
// version: a rollback), what it served is remembered for the grace, so
// those resources answer 503, not 404, as those of a departed server do.
func (m *Members) confirmed(id string, s *server, gen uint64) {
	pre, preDoc := s.confirm(gen)
	if pre == nil {
		return
	}
	now := m.store.Snapshot().Capabilities(id)
	_, vanished := diffGroupVersions(pre.GroupVersions(), now.GroupVersions())
	if len(vanished) > 0 {
		since := m.now()
		s.mu.Lock()
		s.lost, s.lostDoc, s.lostSince = pre, preDoc, since
		s.mu.Unlock()
		m.cfg.Log.Warn("apiserver came back serving less: what it no longer serves answers 503, not 404, for the grace",
			"server", id, "vanished", vanished, "grace ends", m.graceEnd(since))
	}
	m.publish()
}
