package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Removed is what Uninstall took away.
type Removed struct {
	// Links describes each link detached: its pin, type, link and program
	// IDs and where it was attached.
	Links []string
	// Pins are the names of every pin removed, links included, sorted.
	Pins []string
}

// Uninstall removes steering and connstat from this machine: it detaches
// every link pinned under pinPath (BPF_LINK_DETACH, so steering stops for
// new connections even while an agent still holds the link open), removes
// every pin and then the directory. The programs and maps go once no
// process holds them. Connections already assigned stay up; new ones reach
// the apiserver's own socket.
//
// It returns ErrNotInstalled when pinPath does not exist, and refuses,
// without removing anything, a pinPath that is not on a bpffs or that
// holds no layout pin (a directory skewgate did not create: its pins may
// be someone else's).
func Uninstall(pinPath string) (Removed, error) {
	var r Removed
	onBPFFS, err := isBPFFS(existingParent(pinPath))
	if err != nil {
		return r, err
	}
	if !onBPFFS {
		return r, fmt.Errorf("%s is not on a bpffs: skewgate pins only on one (e.g. under %s)", pinPath, DefaultBPFFS)
	}
	entries, err := os.ReadDir(pinPath)
	if errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("%w at %s", ErrNotInstalled, pinPath)
	}
	if err != nil {
		return r, fmt.Errorf("read pin path: %w", err)
	}
	if len(entries) > 0 && !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == pinLayout }) {
		return r, fmt.Errorf("%s holds no %q pin: not skewgate's pin path, nothing removed", pinPath, pinLayout)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, r.remove(filepath.Join(pinPath, e.Name())))
	}
	if err := os.Remove(pinPath); err != nil {
		errs = append(errs, fmt.Errorf("remove pin path: %w", err))
	}
	slices.Sort(r.Pins)
	return r, errors.Join(errs...)
}

// remove detaches path's link, if it is one, and removes the pin.
func (r *Removed) remove(path string) error {
	name := filepath.Base(path)
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		desc, err := detach(l)
		l.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.Links = append(r.Links, name+": "+desc)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove pin %s: %w", name, err)
	}
	r.Pins = append(r.Pins, name)
	return nil
}

// detach detaches l from its hook and describes it. A link whose netns or
// cgroup is already gone is severed: there is nothing to detach.
func detach(l link.Link) (string, error) {
	info, err := l.Info()
	if err != nil {
		return "", err
	}
	desc := fmt.Sprintf("%s link %d, program %d", linkType(info.Type), info.ID, info.Program)
	switch {
	case info.NetNs() != nil:
		desc += fmt.Sprintf(", network namespace %d", info.NetNs().NetnsInode)
	case info.Cgroup() != nil:
		desc += fmt.Sprintf(", cgroup %d", info.Cgroup().CgroupId)
	}
	if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return "", fmt.Errorf("detach %s: %w", desc, err)
	}
	return desc, nil
}

func linkType(t link.Type) string {
	switch t {
	case link.NetNsType:
		return "sk_lookup (netns)"
	case link.CgroupType:
		return "sock_ops (cgroup)"
	}
	return fmt.Sprintf("type %d", t)
}
