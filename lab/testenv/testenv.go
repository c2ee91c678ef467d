// Package testenv decides whether a test that needs privileges or the lab may
// run. In CI (CI=true) such a test must run: missing privileges fail it
// instead of skipping it, so a green CI never hides an untested kernel path.
package testenv

import (
	"os"
	"os/exec"
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

// RequireCommand returns the path of command, from the Debian package pkg.
// Without it the test skips outside CI and fails inside it: .ci/run
// installs pkg, so a missing command there is a broken install step.
func RequireCommand(t testing.TB, command, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(command)
	if err == nil {
		return path
	}
	if InCI() {
		t.Fatalf("%s missing (Debian package %s) and CI=true forbids skipping: %v", command, pkg, err)
	}
	t.Skipf("needs %s (apt-get install %s; runs in CI)", command, pkg)
	return ""
}
