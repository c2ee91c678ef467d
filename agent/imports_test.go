package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// The two halves stay independent: the agent never imports the proxy, and
// no proxy package imports the agent. cmd/skewgate composes them.
func TestHalvesAreIndependent(t *testing.T) {
	for _, tc := range []struct{ pkgs, forbidden string }{
		{"github.com/skewgate/skewgate/agent/...", "github.com/skewgate/skewgate/proxy"},
		{"github.com/skewgate/skewgate/proxy/...", "github.com/skewgate/skewgate/agent"},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkgs).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkgs, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed only %v", tc.pkgs, deps)
		}
		for _, d := range deps {
			if d == tc.forbidden || strings.HasPrefix(d, tc.forbidden+"/") {
				t.Errorf("%s depends on %s", tc.pkgs, d)
			}
		}
	}
}
