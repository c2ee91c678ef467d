package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/skewgate/skewgate/bpf/steer"
)

// setLayout overwrites the version in pins' layout map, as pins left by a
// skewgate of another layout version would read.
func setLayout(t *testing.T, pins string, version uint32) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pins, pinLayout), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), version); err != nil {
		t.Fatal(err)
	}
}

// Pins of other layouts are read for the kill switch at offset 0.
func TestKillSwitchIsFirstField(t *testing.T) {
	if offEnabled != 0 {
		t.Fatalf("steer_config's enabled at offset %d: a layout change must keep it first, where older and newer builds read the kill switch", offEnabled)
	}
}

// TestLayoutReplaced: pins of another layout version (an upgrade that
// changed a map) are removed and installed afresh, logged once with both
// versions; the operator's kill switch survives; `skewgate steer` still
// refuses the other layout read-only.
func TestLayoutReplaced(t *testing.T) {
	for _, tc := range []struct {
		name     string
		on       bool
		wantWho  string
		wantKill string
		// connstatFirst replaces the pins in StartConnStat, as `skewgate
		// run` does (connstat starts before steering).
		connstatFirst bool
	}{
		{"kill switch on", true, "proxy", "killSwitch=on", false},
		{"kill switch off", false, "origin", "killSwitch=\"off, kept\"", false},
		{"kill switch off, connstat first", false, "origin", "killSwitch=\"off, kept\"", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			ln := listenIn(t, n.ns, proxyAddr)
			serveGreeter(t, "proxy", ln)
			first, err := StartSteering(context.Background(), n.steeringConfig(), ln)
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, first, StateSteering)
			ctl, err := OpenControl(n.pins)
			if err != nil {
				t.Fatal(err)
			}
			ctl.SetEnabled(tc.on)
			ctl.Close()
			oldLink := pinnedLinkID(t, n.pins)
			first.Close()
			setLayout(t, n.pins, LayoutVersion+1)
			if _, err := OpenControl(n.pins); !errors.Is(err, ErrLayout) {
				t.Fatalf("steer on layout %d pins: %v, want ErrLayout", LayoutVersion+1, err)
			}

			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			if tc.connstatFirst {
				startConnStat(t, ConnStatConfig{PinPath: n.pins, NetNSPath: n.ns.path, ProxyPort: 16443, Log: log})
			}
			cfg := n.steeringConfig()
			cfg.Log = log
			s := startSteering(t, cfg, ln)
			if tc.on {
				waitState(t, s, StateSteering)
			}
			if newLink := pinnedLinkID(t, n.pins); newLink == oldLink {
				t.Errorf("link %d kept: want the pins installed afresh", oldLink)
			}
			version, err := readLayout(filepath.Join(n.pins, pinLayout))
			if err != nil || version != LayoutVersion {
				t.Errorf("layout after replacing: %d, %v; want %d", version, err, LayoutVersion)
			}
			st := controlState(t, n.pins)
			if st.Enabled != tc.on {
				t.Errorf("kill switch %t after the layout change, want %t", st.Enabled, tc.on)
			}
			if got := n.dial.who(t, targetAddr); got != tc.wantWho {
				t.Errorf("new connection reached %s, want %s", got, tc.wantWho)
			}
			line := logs.String()
			if strings.Count(line, "pins of another layout version removed") != 1 ||
				!strings.Contains(line, fmt.Sprintf("from=%d to=%d", LayoutVersion+1, LayoutVersion)) || !strings.Contains(line, tc.wantKill) || !strings.Contains(line, "level=INFO") {
				t.Errorf("log %q: want one Info line with both versions and %s", line, tc.wantKill)
			}
		})
	}
}

func controlState(t *testing.T, pins string) State {
	t.Helper()
	ctl, err := OpenControl(pins)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	st, err := ctl.State()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Layout 2: hold_until_ns took steer_config's first reserved field, so the
// value keeps its size (the padding stays explicit), and steer_counters
// gained held.
func TestLayoutHold(t *testing.T) {
	if LayoutVersion != 2 {
		t.Errorf("LayoutVersion %d: the hold came with layout 2; a change since must bump it and update this test", LayoutVersion)
	}
	if size, off := unsafe.Sizeof(steer.SteerConfig{}), offHold; size != 32 || off != 16 || offLease != 8 {
		t.Errorf("steer_config: %d bytes, lease at %d, hold at %d; want 32, 8, 16", size, offLease, off)
	}
	if steer.SteerReasonREASON_MAX != 8 || reasonName(steer.SteerReasonREASON_HELD) != "held" {
		t.Errorf("steer_counters: %d reasons, held named %q", steer.SteerReasonREASON_MAX, reasonName(steer.SteerReasonREASON_HELD))
	}
}
