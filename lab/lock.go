package lab

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Lock waits for the lab lock: an exclusive flock on one file in the
// temporary directory, released when the returned file is closed (by this
// process and by any child that inherited it, such as the reaper). Every
// lab uses the same namespaces, bridge and addresses, so the test packages
// and skewlab's drill take turns through it.
func Lock() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "skewgate-lab.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lab lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return f, nil
	}
	fmt.Fprintln(os.Stderr, "lab: waiting for the lab lock (another lab test or drill is running)")
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lab lock: %w", err)
	}
	return f, nil
}
