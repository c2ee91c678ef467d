package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/skewgate/skewgate/bpf/steer"
)

// LayoutVersion is the version of the pinned map layout this build reads and
// writes. Bump it whenever a map's key or value changes meaning, even when
// its size does not; cilium/ebpf already refuses pins whose type, sizes or
// flags differ, but it cannot see a reinterpreted field.
//
// 2: steer_config's first reserved field became hold_until_ns, and
// steer_counters gained the reason held.
const LayoutVersion = 2

// Pin names under the pin path. bpffs names may not contain '.'.
const (
	pinLayout      = "layout"
	pinSteerConfig = "steer_config"
	pinSteerLink   = "steer_link"
	pinConnLink    = "connstat_link"
)

var layoutSpec = ebpf.MapSpec{
	Name:       "layout",
	Type:       ebpf.Array,
	KeySize:    4,
	ValueSize:  4,
	MaxEntries: 1,
}

// checkLayout records LayoutVersion in a fresh pin path. Pins of another
// layout version, left by an upgrade or a rollback that changed a map, are
// replaced: uninstalled (links detached, so new connections reach the
// apiserver meanwhile: fail open) and started afresh by the caller. They
// hold no state worth keeping but the operator's kill switch, which is
// carried over when it can be read (see killSwitchOff). The replacement is
// logged once, at Info, with both versions.
func checkLayout(pinPath string, log *slog.Logger) error {
	path := filepath.Join(pinPath, pinLayout)
	version, err := readLayout(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return writeLayout(path)
	case err != nil:
		return err
	case version == LayoutVersion:
		return nil
	}
	return replaceLayout(pinPath, version, log)
}

func readLayout(path string) (uint32, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer m.Close()
	var version uint32
	if err := m.Lookup(uint32(0), &version); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return version, nil
}

func replaceLayout(pinPath string, old uint32, log *slog.Logger) error {
	off, err := killSwitchOff(pinPath)
	killSwitch := "on"
	switch {
	case err != nil:
		killSwitch = fmt.Sprintf("unreadable (%v): starts on", err)
	case off:
		killSwitch = "off, kept"
	}
	if _, err := Uninstall(pinPath); err != nil {
		return fmt.Errorf("%w: remove pins of layout %d at %s: %w", ErrLayout, old, pinPath, err)
	}
	log.Info("pins of another layout version removed; installing afresh, new connections reach the apiserver meanwhile",
		"pins", pinPath, "from", old, "to", LayoutVersion, "killSwitch", killSwitch)
	if err := ensurePinDir(pinPath); err != nil {
		return err
	}
	if err := writeLayout(filepath.Join(pinPath, pinLayout)); err != nil {
		return err
	}
	if off {
		return pinKillSwitchOff(pinPath)
	}
	return nil
}

// killSwitchOff reads the kill switch from pins of any layout version:
// enabled is the first field of steer_config in every layout (a layout
// change must keep it there). No steer_config (connstat only) is not off.
func killSwitchOff(pinPath string) (bool, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, steer.SteerMapSteerConfig), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer m.Close()
	value := make([]byte, m.ValueSize())
	if len(value) < 4 {
		return false, fmt.Errorf("steer_config value of %d bytes", len(value))
	}
	if err := m.Lookup(uint32(0), value); err != nil {
		return false, err
	}
	return binary.NativeEndian.Uint32(value[offEnabled:]) == 0, nil
}

// pinKillSwitchOff creates this layout's steer_config with the kill switch
// off, so StartSteering finds it and keeps it off.
func pinKillSwitchOff(pinPath string) error {
	spec, err := steer.LoadSteer()
	if err != nil {
		return err
	}
	ms := spec.Maps[steer.SteerMapSteerConfig].Copy()
	ms.Pinning = ebpf.PinByName
	m, err := ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: pinPath})
	if err != nil {
		return classify(fmt.Errorf("create steer_config: %w", err))
	}
	defer m.Close()
	if err := m.Put(uint32(0), steer.SteerConfig{Enabled: 0}); err != nil {
		return fmt.Errorf("write steer_config: %w", err)
	}
	return nil
}

func writeLayout(path string) error {
	m, err := ebpf.NewMap(&layoutSpec)
	if err != nil {
		return fmt.Errorf("create layout map: %w", err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), uint32(LayoutVersion)); err != nil {
		return fmt.Errorf("write layout map: %w", err)
	}
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("pin layout map: %w", err)
	}
	return nil
}

// loadPinned loads spec with every map pinned by name under pinPath: maps
// already pinned there are reused (their contents survive), the others are
// created and pinned. Maps shared between programs (steered_flows) are
// shared through their pin.
func loadPinned(spec *ebpf.CollectionSpec, pinPath string, objs any) error {
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinByName
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinPath}}
	if err := spec.LoadAndAssign(objs, opts); err != nil {
		return classify(fmt.Errorf("load programs: %w", err))
	}
	return nil
}

// updateOrAttach swaps prog into the link pinned at pinPath when that link
// is still attached where want says, so the attachment never lapses;
// otherwise (no pin, or a severed link whose netns or cgroup is gone) it
// attaches afresh and pins the new link.
func updateOrAttach(pinPath string, prog *ebpf.Program, want func(*link.Info) bool, attach func() (link.Link, error)) (link.Link, error) {
	old, err := link.LoadPinnedLink(pinPath, nil)
	switch {
	case err == nil:
		info, ierr := old.Info()
		if ierr == nil && want(info) {
			if err := old.Update(prog); err != nil {
				old.Close()
				return nil, classify(fmt.Errorf("update link %s: %w", pinPath, err))
			}
			return old, nil
		}
		// Severed: the kernel detached it when its netns or cgroup died.
		old.Unpin()
		old.Close()
	case !errors.Is(err, os.ErrNotExist):
		return nil, classify(fmt.Errorf("open link %s: %w", pinPath, err))
	}
	l, err := attach()
	if err != nil {
		return nil, classify(fmt.Errorf("attach: %w", err))
	}
	if err := l.Pin(pinPath); err != nil {
		l.Close()
		return nil, classify(fmt.Errorf("pin link %s: %w", pinPath, err))
	}
	return l, nil
}

// RemovePins is Uninstall without its report: it detaches steering and
// connstat and removes every pin under pinPath, then the directory. A
// missing pinPath is not an error.
func RemovePins(pinPath string) error {
	if _, err := Uninstall(pinPath); err != nil && !errors.Is(err, ErrNotInstalled) {
		return err
	}
	return nil
}
