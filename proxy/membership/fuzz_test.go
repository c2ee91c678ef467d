package membership

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skewgate/skewgate/proxy/discovery"
)

// FuzzStateFile: whatever the state file holds (a torn write, an older
// layout, someone's edit), Restore either refuses it with an error or
// restores peers that are departed or members, never the local server, and
// the table stays consistent.
func FuzzStateFile(f *testing.F) {
	recent := time.Now().Add(-time.Minute).UTC()
	good, _ := json.Marshal(savedState{Version: StateLayout, Servers: []savedServer{
		{URL: "https://198.18.0.2:6443", LastHealthy: recent, FetchedAt: recent, Doc: &discovery.Doc{}},
		{URL: "https://127.0.0.1:6443", LastHealthy: recent, FetchedAt: recent, Doc: &discovery.Doc{}},
	}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"servers":[{"url":"http://x"},{"url":"https://[::1"},{"url":"https://198.18.0.3:6443","doc":null}]}`))
	f.Add([]byte(`{"version":99}`))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := New(Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:6443"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Restore(path); err != nil {
			return
		}
		tbl := m.Table()
		if tbl.Local.ID != "127.0.0.1:6443" {
			t.Fatalf("the local server changed to %q", tbl.Local.ID)
		}
		for _, p := range tbl.Peers {
			if p.ID == tbl.Local.ID {
				t.Fatal("the local server restored as its own peer")
			}
			if p.Healthy {
				t.Fatalf("restored peer %s healthy before any probe", p.ID)
			}
		}
	})
}
