package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/skewgate/skewgate/proxy/discovery"
)

// stateVersion is the layout of the state file; another layout is ignored.
const stateVersion = 1

// stateResolution is how precisely the state file says when a peer was last
// healthy; a restored peer's grace may end this much early.
const stateResolution = 30 * time.Second

// savedState is what a run leaves for the next: every peer seen healthy and
// what it served. A skewgate that restarts while a peer is down (and, with
// --kubeconfig, already gone from the EndpointSlices) knows from it that the
// peer's resources are unavailable, not absent.
type savedState struct {
	Version int           `json:"version"`
	Servers []savedServer `json:"servers"`
}

type savedServer struct {
	URL string `json:"url"`
	// LastHealthy is when a probe last found it healthy.
	LastHealthy time.Time      `json:"lastHealthy"`
	FetchedAt   time.Time      `json:"fetchedAt"`
	Doc         *discovery.Doc `json:"doc"`
}

// SaveState writes every peer that has been healthy and whose discovery is
// known to path, atomically (a temporary file renamed over it, mode 0600).
// It writes only when the content changed since the last save.
func (m *Members) SaveState(path string) error {
	snap := m.Discovery()
	st := savedState{Version: stateVersion}
	m.mu.Lock()
	for id, s := range m.servers {
		s.mu.Lock()
		// Coarse, so a file that says the same is not rewritten (and
		// fsynced, on a disk etcd may share) after every probe.
		last := s.lastHealthy.Truncate(stateResolution)
		s.mu.Unlock()
		ds := snap.Servers[id]
		if s.local || last.IsZero() || ds.Doc == nil {
			continue
		}
		st.Servers = append(st.Servers, savedServer{URL: s.backend.URL.String(), LastHealthy: last, FetchedAt: ds.FetchedAt, Doc: ds.Doc})
	}
	m.mu.Unlock()
	slices.SortFunc(st.Servers, func(a, b savedServer) int { return strings.Compare(a.URL, b.URL) })
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	if bytes.Equal(data, m.saved) {
		return nil
	}
	if err := writeAtomic(path, data); err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	m.saved = data
	return nil
}

func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename: nothing to remove
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Restore brings back, before Run, the peers the state file at path names
// that were healthy within DepartGrace: their last-known discovery becomes
// last-known-good (confirmed or replaced by the first fetch), and one that
// is not a member now comes back departed since it was last healthy, so its
// resources answer 503 until the grace ends or it is listed again. It
// returns how many it restored. A missing file restores nothing and is no
// error.
func (m *Members) Restore(path string) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("state file %s: %w", path, err)
	}
	var st savedState
	if err := json.Unmarshal(data, &st); err != nil {
		return 0, fmt.Errorf("state file %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return 0, fmt.Errorf("state file %s: layout %d, this build reads %d", path, st.Version, stateVersion)
	}
	n := m.restore(st.Servers, time.Now())
	m.publish()
	return n, nil
}

func (m *Members) restore(servers []savedServer, now time.Time) int {
	n := 0
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, saved := range servers {
		u, err := url.Parse(saved.URL)
		if err != nil || saved.Doc == nil || now.Sub(saved.LastHealthy) >= m.cfg.DepartGrace {
			continue
		}
		id := ID(u)
		if id == m.localID {
			continue
		}
		s, member := m.servers[id]
		if !member {
			s = m.add(u, false)
			s.setDeparted(saved.LastHealthy)
		}
		s.mu.Lock()
		if s.lastHealthy.IsZero() {
			s.lastHealthy = saved.LastHealthy
		}
		s.mu.Unlock()
		m.store.Restore(id, saved.Doc, saved.FetchedAt)
		n++
	}
	return n
}

// KeepState restores the previous run's peers from path and saves this
// run's every 10 s (only when changed) until ctx ends. A state file that
// cannot be read or written costs only the restart protection: a warning,
// never a failure.
func (m *Members) KeepState(ctx context.Context, path string, log *slog.Logger) {
	if n, err := m.Restore(path); err != nil {
		log.Warn("state file not restored", "err", err)
	} else if n > 0 {
		log.Info("restored peers from the state file", "peers", n, "file", path)
	}
	go func() {
		var lastErr string
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := m.SaveState(path)
			switch {
			case err != nil && err.Error() != lastErr:
				log.Warn("state not saved", "err", err)
			case err == nil && lastErr != "":
				log.Info("state saved again", "file", path)
			}
			lastErr = ""
			if err != nil {
				lastErr = err.Error()
			}
		}
	}()
}
