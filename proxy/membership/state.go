package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/skewgate/skewgate/proxy/discovery"
)

// StateLayout is the layout of the state file; another layout is ignored
// (docs/versioning.md).
// Fields were only ever added to layout 1 (builtInGroups and releases
// last): a file an older skewgate wrote restores what it holds, and an
// older skewgate (a rollback of skewgate itself) reads a newer file,
// ignoring what it does not know.
const StateLayout = 1

// stateResolution is how precisely the state file says when a peer was last
// healthy; a restored peer's grace may end this much early.
const stateResolution = 30 * time.Second

// savedState is what a run leaves for the next: every server seen healthy
// (the local one too) and what it served, and the graces in force. A
// skewgate that restarts while a peer is down (and, with --kubeconfig,
// already gone from the EndpointSlices), or inside a rollback's grace,
// knows from it that the types those servers served are unavailable, not
// absent, for the rest of their grace.
type savedState struct {
	Version int           `json:"version"`
	Servers []savedServer `json:"servers"`
	// Window is the skew window while its hold lasts: a skewgate that
	// restarts inside it (the rollback's last step replaces pods, say)
	// keeps steering until the hold ends, as its peers do, instead of
	// handing its connections back minutes before theirs.
	Window *savedWindow `json:"window,omitempty"`
	// GraceUntil is the cluster's override of the graces
	// (SetGraceUntil) as last read: restored before the cluster's switch
	// is read again, so that a grace it holds past the flag's end is not
	// dropped on the way (the graces above are restored only while they
	// hold). The switch, once read, replaces it.
	GraceUntil *time.Time `json:"graceUntil,omitempty"`
	// BuiltInGroups are every group the cluster's APIServices said
	// kube-apiserver serves itself: a restart that cannot read them (the
	// local apiserver away, the cluster not listed yet) still counts a
	// new release's groups as built in.
	BuiltInGroups []string `json:"builtInGroups,omitempty"`
	// Releases are what each version the cluster ran served, for a
	// rollback plan between any two of them.
	Releases []Release `json:"releases,omitempty"`
}

// savedWindow is when the members last differed, and how.
type savedWindow struct {
	Reason string    `json:"reason"`
	Last   time.Time `json:"last"`
	// Since is when the window opened (zero in files of earlier builds):
	// a restart does not move the dashboard's "since".
	Since time.Time `json:"since,omitzero"`
}

type savedServer struct {
	URL string `json:"url"`
	// Local marks the local apiserver, whatever its URL is next time.
	Local bool `json:"local,omitempty"`
	// LastHealthy is when a probe last found it healthy.
	LastHealthy time.Time      `json:"lastHealthy"`
	FetchedAt   time.Time      `json:"fetchedAt"`
	Doc         *discovery.Doc `json:"doc"`
	// LostDoc is what it served before it came back serving less, at
	// LostSince: the grace of a rollback, which began then.
	LostDoc   *discovery.Doc `json:"lostDoc,omitempty"`
	LostSince time.Time      `json:"lostSince,omitzero"`
}

// SaveState writes every server that has been healthy and whose discovery
// is known, and the graces in force, to path, atomically (a temporary file
// renamed over it, mode 0600). It writes only when the content changed
// since the last save.
func (m *Members) SaveState(path string) error {
	snap, now := m.Discovery(), m.now()
	st := savedState{Version: StateLayout}
	m.mu.Lock()
	for id, s := range m.servers {
		s.mu.Lock()
		// Coarse, so a file that says the same is not rewritten (and
		// fsynced, on a disk etcd may share) after every probe.
		last := s.lastHealthy.Truncate(stateResolution)
		lost, lostSince := s.lostDoc, s.lostSince
		s.mu.Unlock()
		ds := snap.Servers[id]
		if last.IsZero() || ds.Doc == nil {
			continue
		}
		saved := savedServer{URL: s.backend.URL.String(), Local: s.local, LastHealthy: last, FetchedAt: ds.FetchedAt, Doc: ds.Doc}
		if lost != nil && m.inHold(lostSince, now) {
			saved.LostDoc, saved.LostSince = lost, lostSince
		}
		st.Servers = append(st.Servers, saved)
	}
	if m.builtIn.groups != nil {
		st.BuiltInGroups = slices.Sorted(maps.Keys(m.builtIn.groups))
	}
	for _, v := range slices.Sorted(maps.Keys(m.releases)) {
		st.Releases = append(st.Releases, m.releases[v])
	}
	m.mu.Unlock()
	st.Window = m.savedWindow()
	st.GraceUntil = m.graceUntil.Load()
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
	m.stateFile.Path = path
	if err := writeAtomic(path, data); err != nil {
		m.stateFile.Error = err.Error()
		return fmt.Errorf("state file %s: %w", path, err)
	}
	m.saved = data
	m.stateFile.Saved, m.stateFile.Error = m.now(), ""
	return nil
}

// StateFileStatus is how the state file's last write went: what preflight
// reads before an upgrade, since a grace the file cannot keep lapses on the
// next restart of skewgate.
type StateFileStatus struct {
	Path string `json:"path"`
	// Saved is when it was last written (zero: not yet; it is written
	// when its content changes, the first time within 10 s of the start).
	Saved time.Time `json:"saved,omitzero"`
	// Error is why the last write failed ("": it did not).
	Error string `json:"error,omitempty"`
}

// StateFile returns how the state file's last write went; ok is false
// when skewgate keeps no state file.
func (m *Members) StateFile() (st StateFileStatus, ok bool) {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	return m.stateFile, m.stateFile.Path != ""
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

// Restore brings back, before Run, the servers the state file at path
// names that were healthy within the grace: their last-known discovery
// becomes last-known-good (confirmed or replaced by the first fetch), and
// a peer that is not a member now comes back departed since it was last
// healthy, so its types answer 503 until the grace ends or it is listed
// again. Every server (the local one too, and a peer listed only later)
// comes back as one that went down then: until a read after its return is judged it may have come
// back on another version, and if it serves less, what it served is held
// for a grace that begins then — a rollback that happened while skewgate
// was restarting. A rollback's grace already in force comes back with its
// start. It returns how many peers it restored. A missing file restores
// nothing and is no error.
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
	if st.Version != StateLayout {
		return 0, fmt.Errorf("state file %s: layout %d, this build reads %d", path, st.Version, StateLayout)
	}
	if st.GraceUntil != nil {
		m.graceUntil.CompareAndSwap(nil, st.GraceUntil) // one already read from the cluster wins
	}
	n := m.restore(st.Servers, m.now())
	if len(st.BuiltInGroups) > 0 {
		m.mu.Lock()
		m.addBuiltIn(BuiltInFromStateFile, st.BuiltInGroups...)
		m.mu.Unlock()
	}
	m.restoreReleases(st.Releases)
	if w := st.Window; w != nil {
		m.skew.mu.Lock()
		if w.Last.After(m.skew.last) {
			m.skew.last, m.skew.reason, m.skew.since = w.Last, w.Reason, w.Since
		}
		m.skew.mu.Unlock()
	}
	m.publish()
	return n, nil
}

// savedWindow is the window to save: nil once its hold is over. The
// window's clock is the wall clock (Window reads it).
func (m *Members) savedWindow() *savedWindow {
	w := &m.skew
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last.IsZero() || !time.Now().Before(w.last.Add(m.cfg.WindowHold)) {
		return nil
	}
	// Rounded up, so that the file is not rewritten at every read while
	// the members differ: a restored hold lasts up to this much longer.
	return &savedWindow{Reason: w.reason, Last: w.last.Truncate(stateResolution).Add(stateResolution), Since: w.since.Truncate(stateResolution)}
}

func (m *Members) restore(servers []savedServer, now time.Time) int {
	n := 0
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, saved := range servers {
		u, err := url.Parse(saved.URL)
		if err != nil || saved.Doc == nil || !m.inHold(saved.LastHealthy, now) {
			continue
		}
		id := ID(u)
		if saved.Local {
			id = m.localID
		} else if id == m.localID {
			continue // a peer then, the local server now: its own entry says
		}
		s, member := m.servers[id]
		if !member {
			s = m.add(u, false)
			s.setDeparted(saved.LastHealthy)
		}
		m.store.Restore(id, saved.Doc, saved.FetchedAt)
		caps := m.store.Snapshot().Capabilities(id)
		s.mu.Lock()
		if s.lastHealthy.IsZero() {
			s.lastHealthy = saved.LastHealthy
		}
		// A peer not listed yet (with --kubeconfig the cluster's list is
		// read after the restore) is in doubt as much as a member: listed
		// again, it may have come back on another version meanwhile.
		if !s.unconfirmed {
			s.unconfirmed, s.restored, s.downSince = true, true, saved.LastHealthy
			s.preDown, s.preDownDoc = caps, saved.Doc
		}
		if saved.LostDoc != nil && m.inHold(saved.LostSince, now) && s.lost == nil {
			s.lost, s.lostDoc, s.lostSince = discovery.NewCapabilities(saved.LostDoc), saved.LostDoc, saved.LostSince
		}
		s.mu.Unlock()
		if !s.local {
			n++
		}
	}
	return n
}

// KeepState restores the previous run's peers from path and saves this
// run's every 10 s (only when changed) until ctx ends. A state file that
// cannot be read or written costs only the restart protection: a warning,
// never a failure.
func (m *Members) KeepState(ctx context.Context, path string, log *slog.Logger) {
	m.saveMu.Lock()
	m.stateFile.Path = path
	m.saveMu.Unlock()
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
