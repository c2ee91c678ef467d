package agent

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

var (
	// ErrNotPermitted means the process lacks the privileges to load and
	// attach BPF programs (root, or CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN).
	ErrNotPermitted = errors.New("not permitted")
	// ErrNotSupported means the kernel lacks a feature the programs need
	// (sk_lookup: Linux 5.9; sock_ops socket storage and netns cookie: 5.15).
	ErrNotSupported = errors.New("not supported by this kernel")
	// ErrLayout means pins exist with a map layout this build cannot use.
	ErrLayout = errors.New("incompatible pinned map layout")
	// ErrNotInstalled means the pin path holds no skewgate pins.
	ErrNotInstalled = errors.New("steering not installed")
)

// classify wraps err with the sentinel that tells an operator what to fix:
// privileges, kernel, or stale pins. Other errors are returned as they are.
func classify(err error) error {
	var verr *ebpf.VerifierError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &verr):
		// The verifier's EACCES/EINVAL means this kernel rejects the
		// program, not that the caller lacks privileges.
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: %w", ErrNotPermitted, err)
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTSUP):
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	case errors.Is(err, ebpf.ErrMapIncompatible):
		return fmt.Errorf("%w: %w", ErrLayout, err)
	}
	return err
}
