package agent

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProbeSweep: this kernel (the lab's and CI's) can end sockets, and the
// probe says so; a kernel without CONFIG_INET_DIAG_DESTROY's answer is
// ErrNotSupported.
func TestProbeSweep(t *testing.T) {
	if err := ProbeSweep(); err != nil {
		t.Fatalf("ProbeSweep on a kernel whose sweep tests pass: %v", err)
	}
	if err := sweepSupport(unix.EOPNOTSUPP); !errors.Is(err, ErrNotSupported) {
		t.Errorf("EOPNOTSUPP: %v, want ErrNotSupported", err)
	}
	if err := sweepSupport(unix.EPERM); err == nil || errors.Is(err, ErrNotSupported) {
		t.Errorf("EPERM: %v, want another error", err)
	}
	if err := sweepSupport(nil); err == nil {
		t.Error("a destroyed non-existent socket taken as support")
	}
}
