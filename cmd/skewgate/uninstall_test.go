package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/lab/testenv"
)

func TestUninstallRefusesNonBPFFS(t *testing.T) {
	code, _, errOut := skewgate(t, "uninstall", "--pin-path", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "is not on a bpffs") {
		t.Errorf("exit %d, stderr %q: want 1 and a path not on a bpffs", code, errOut)
	}
}

// TestUninstallTwice installs connstat with the agent's code on a fresh pin
// path, uninstalls it, and uninstalls again: the second run finds nothing
// and succeeds.
func TestUninstallTwice(t *testing.T) {
	testenv.RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	pins := filepath.Join(agent.DefaultBPFFS, "sgt-"+hex.EncodeToString(b))
	t.Cleanup(func() { agent.RemovePins(pins) })
	cs, err := agent.StartConnStat(agent.ConnStatConfig{PinPath: pins})
	if err != nil {
		t.Fatal(err)
	}
	if st := cs.Status(); st.State == agent.StateDisabled {
		t.Fatal(st)
	}
	cs.Close()

	code, out, errOut := skewgate(t, "uninstall", "--pin-path", pins)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"detached connstat_link: sock_ops (cgroup) link ", "removed pin layout\n", "removed " + pins + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if _, err := os.Stat(pins); !os.IsNotExist(err) {
		t.Errorf("pin path after uninstall: %v", err)
	}
	code, out, errOut = skewgate(t, "uninstall", "--pin-path", pins)
	if code != 0 || out != "nothing installed at "+pins+"\n" {
		t.Errorf("second run: exit %d, %q %q; want 0 and nothing installed", code, out, errOut)
	}
}

// TestUninstallRemovesState: --state-file removes the file, a partial
// write of it and the hand-over socket; a second run finds none of them.
func TestUninstallRemovesState(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	files := []string{state, filepath.Join(dir, "state.handover.sock"), filepath.Join(dir, ".state.json.123")}
	for _, f := range files {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if err := removeState(&b, state); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s after uninstall: %v", f, err)
		}
		if !strings.Contains(b.String(), "removed "+f+"\n") {
			t.Errorf("output %q lacks the removal of %s", b.String(), f)
		}
	}
	b.Reset()
	if err := removeState(&b, state); err != nil || strings.Contains(b.String(), "removed") {
		t.Errorf("second run: %v, %q; want nothing removed", err, b.String())
	}
}
