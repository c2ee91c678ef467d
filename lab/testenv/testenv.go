// Package testenv decides whether a test that needs privileges or the lab may
// run. In CI (CI=true) such a test must run: missing privileges fail it
// instead of skipping it, so a green CI never hides an untested kernel path.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI, where nothing may skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot skips t when not root outside CI, and fails it inside CI.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatal("this test needs root and CI=true forbids skipping it")
	}
	t.Skip("needs root (runs in CI)")
}
