package monitoring

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/lab/testenv"
)

// promtool returns the path of promtool (Debian package prometheus). It
// skips t when promtool is missing, except in CI, where that fails t.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if testenv.InCI() {
		t.Fatalf("promtool is missing and CI=true forbids skipping (.ci/run installs the Debian package prometheus): %v", err)
	}
	t.Skipf("promtool is missing (apt-get install prometheus; runs in CI): %v", err)
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", "alerts.yaml")
}

func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", "alerts_test.yaml")
}
