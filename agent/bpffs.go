package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultBPFFS is where the kernel documentation and most tools expect a
// bpffs. Containers and some distributions start without it mounted.
const DefaultBPFFS = "/sys/fs/bpf"

// ensurePinDir creates pinPath on a bpffs. When the nearest existing parent
// is DefaultBPFFS but nothing is mounted there, it mounts a bpffs first.
func ensurePinDir(pinPath string) error {
	pinPath = filepath.Clean(pinPath)
	parent := existingParent(pinPath)
	onBPFFS, err := isBPFFS(parent)
	if err != nil {
		return err
	}
	if !onBPFFS {
		if parent != DefaultBPFFS {
			return fmt.Errorf("pin path %s: %s is not on a bpffs", pinPath, parent)
		}
		if err := unix.Mount("bpf", DefaultBPFFS, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs at %s: %w", DefaultBPFFS, err)
		}
	}
	if err := os.MkdirAll(pinPath, 0o700); err != nil {
		return fmt.Errorf("create pin path: %w", err)
	}
	return nil
}

func existingParent(path string) string {
	for {
		if _, err := os.Stat(path); err == nil || !errors.Is(err, os.ErrNotExist) {
			return path
		}
		parent := filepath.Dir(path)
		if parent == path {
			return path
		}
		path = parent
	}
}

func isBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Type == unix.BPF_FS_MAGIC, nil
}
