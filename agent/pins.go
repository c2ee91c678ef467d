package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// LayoutVersion is the version of the pinned map layout this build reads and
// writes. Bump it whenever a map's key or value changes meaning, even when
// its size does not; cilium/ebpf already refuses pins whose type, sizes or
// flags differ, but it cannot see a reinterpreted field.
const LayoutVersion = 1

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

// checkLayout records LayoutVersion in a fresh pin path and refuses one
// holding another version. Pins of another version are not migrated: they
// hold no state worth keeping beyond the kill switch, so the operator
// removes them (RemovePins, or rm -r the pin path) and the agent
// starts fresh. Until then steering stays disabled and connections reach the
// apiserver.
func checkLayout(pinPath string) error {
	path := filepath.Join(pinPath, pinLayout)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return writeLayout(path)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer m.Close()
	var version uint32
	if err := m.Lookup(uint32(0), &version); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if version != LayoutVersion {
		return fmt.Errorf("%w: %s has layout %d, this build uses %d; remove the pins to reinstall",
			ErrLayout, pinPath, version, LayoutVersion)
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
