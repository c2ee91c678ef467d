package docs

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// TestVersioningNamesTheLayouts: versioning.md's table of layouts states
// the versions the code writes, so a layout bumped in code without its
// note (and the policy's reading of it) fails here.
func TestVersioningNamesTheLayouts(t *testing.T) {
	page, err := os.ReadFile("versioning.md")
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[string]int{
		"agent.LayoutVersion":    agent.LayoutVersion,
		"membership.StateLayout": membership.StateLayout,
		"admin.SteeringLayout":   admin.SteeringLayout,
	} {
		m := regexp.MustCompile(`(?m)^\| [^|]+ \| (\d+) \| ` + "`" + regexp.QuoteMeta(code) + "`" + ` \|$`).FindSubmatch(page)
		if m == nil {
			t.Errorf("versioning.md: no row for %s", code)
			continue
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("versioning.md says %s is %d, the code %d: write the upgrade note", code, got, want)
		}
	}
}
